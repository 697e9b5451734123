// Read zarrgate-served fixtures over HTTP with zarrita.js (its FetchStore),
// unmodified, under Node.
//
//   node read_zarrita.mjs BASE_URL FIXTURES_DIR
//
// Every Zarr v3 array of FIXTURES_DIR/manifest.json in the groups zarrita
// reads here (plain data types, codecs, sharded, strings) is compared with
// its expected values. Prints one JSON line {client, read, mismatch} and
// exits 1 on a mismatch or error.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import * as zarr from "zarrita";

const [base, fixtures] = process.argv.slice(2);
const manifest = JSON.parse(readFileSync(join(fixtures, "manifest.json"), "utf8"));
const store = new zarr.FetchStore(base.replace(/\/$/, ""));
const root = zarr.root(store);

// Types zarrita reads into typed arrays or string arrays.
const numeric = {
  bool: Uint8Array, int8: Int8Array, int16: Int16Array, int32: Int32Array, int64: BigInt64Array,
  uint8: Uint8Array, uint16: Uint16Array, uint32: Uint32Array, uint64: BigUint64Array,
  float32: Float32Array, float64: Float64Array,
};

function sameNumbers(got, want) {
  if (got.length !== want.length) return false;
  for (let i = 0; i < got.length; i++) {
    const a = got[i], b = want[i];
    if (a === b || (typeof a === "number" && Number.isNaN(a) && Number.isNaN(b))) continue;
    if (typeof a === "boolean" && Number(a) === b) continue;
    return false;
  }
  return true;
}

// What zarrita 0.7.5 itself cannot read, whatever the server: shard
// indexes at the start of the shard (it always reads the index as a
// suffix) and shards inside shards.
const unsupported = new Set(["v3/shard/start", "v3/shard/nested"]);

// cOrder returns the elements of a chunk in C order, whatever its strides
// (zarrita returns a transposed array in the transposed memory order).
function cOrder(chunk) {
  if (typeof chunk !== "object" || chunk === null || !("data" in chunk)) return [chunk]; // a 0-d array's value
  const { data, shape, stride } = chunk;
  const n = shape.reduce((x, y) => x * y, 1);
  const out = new Array(n);
  const idx = new Array(shape.length).fill(0);
  for (let i = 0; i < n; i++) {
    let off = 0;
    for (let d = 0; d < shape.length; d++) off += idx[d] * stride[d];
    out[i] = data.get ? data.get(off) : data[off];
    for (let d = shape.length - 1; d >= 0; d--) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

const read = [], mismatch = [], skipped = [];
for (const a of manifest.arrays) {
  if (a.zarr_format !== 3 || unsupported.has(a.path)) continue;
  const dt = a.dtype.replace(/^[<>|=]/, "");
  const want = (() => {
    const p = join(fixtures, "expected", a.expected);
    if (a.kind === "strings") return JSON.parse(readFileSync(p, "utf8"));
    if (a.kind !== "fixed" || !(dt in numeric)) return null;
    const buf = readFileSync(p);
    const T = numeric[dt];
    return new T(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
  })();
  if (want === null) {
    skipped.push(a.path); // float16, complex, raw bits, bytes: no JS typed array of zarrita's
    continue;
  }
  try {
    const arr = await zarr.open.v3(root.resolve(a.path), { kind: "array" });
    const chunk = await zarr.get(arr);
    read.push(a.path);
    const got = cOrder(chunk);
    if (!sameNumbers(got, Array.from(want))) mismatch.push(a.path);
  } catch (e) {
    mismatch.push(`${a.path}: ${e.message}`);
  }
}
console.log(JSON.stringify({ client: "zarrita", read, mismatch, skipped }));
process.exit(mismatch.length ? 1 : 0);
