// The TypeScript client against real zarrgate servers: the Go client
// (test/gowriter) writes arrays of known values through one server, and
// this client reads them back, whole and in slabs, through it, through a
// token-protected server, a TLS server requiring client certificates, and
// a unix socket, all serving the same directory.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { Code, ConnectError, connect, resolveSelection, type Client, type Selection, type TypedArray } from "../src/index.js";
import { patterns, type Value } from "./patterns.js";
import { newToken, startServer, writeArrays, type Entry, type Server } from "./server.js";

let dir: string;
let plain: Server;
let manifest: Entry[];
let client: Client;
const servers: Server[] = [];
const clients: Client[] = [];

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "zarrgate-ts-"));
  plain = await startServer(join(dir, "root"), ["--memory-limit", "256MiB"]);
  servers.push(plain);
  manifest = writeArrays(plain.addr, dir);
  client = open(plain.addr);
});

after(async () => {
  for (const c of clients) c.close();
  await Promise.all(servers.map((s) => s.stop()));
  rmSync(dir, { recursive: true, force: true });
});

function open(...args: Parameters<typeof connect>): Client {
  const c = connect(...args);
  clients.push(c);
  return c;
}

function entry(path: string): Entry {
  const e = manifest.find((x) => x.path === path);
  assert.ok(e, `${path} is not in the Go writer's manifest`);
  return e;
}

/** Expects f to fail with a ConnectError of code; returns it. */
async function rejectsWith(f: () => Promise<unknown>, code: Code, message?: RegExp): Promise<ConnectError> {
  try {
    await f();
  } catch (e) {
    assert.ok(e instanceof ConnectError, `want a ConnectError, got ${e}`);
    assert.equal(Code[e.code], Code[code], `code of: ${e.message}`);
    if (message) assert.match(e.rawMessage, message);
    return e;
  }
  assert.fail(`no error, want ${Code[code]}`);
}

// The values a selection of an array written with its pattern holds, in
// C order, computed from the selection itself.
function expected(e: Entry, sel: Selection | undefined): { values: Value[]; shape: number[] } {
  const slices = resolveSelection(sel, e.shape);
  const shape = slices.map((s) => Math.max(0, Math.ceil((s.stop - s.start) / s.step)));
  const strides = e.shape.map((_, d) => e.shape.slice(d + 1).reduce((a, b) => a * b, 1));
  const f = patterns[e.dtype];
  const values: Value[] = [];
  const n = shape.reduce((a, b) => a * b, 1);
  const idx = shape.map(() => 0);
  for (let k = 0; k < n; k++) {
    let flat = 0;
    for (let d = 0; d < shape.length; d++) flat += (slices[d].start + idx[d] * slices[d].step) * strides[d];
    values.push(f(flat));
    for (let d = shape.length - 1; d >= 0; d--) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return { values, shape };
}

function assertValues(got: TypedArray, want: Value[], what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++) {
    if (got[i] !== want[i]) assert.fail(`${what}: element ${i} is ${got[i]}, want ${want[i]}`);
  }
}

const kinds: Record<string, Function> = {
  float32: Float32Array,
  float64: Float64Array,
  int16: Int16Array,
  uint8: Uint8Array,
  int32: Int32Array,
  int64: BigInt64Array,
  uint64: BigUint64Array,
  bool: Uint8Array,
};

// Selections tried on every array, built from its shape.
function selections(shape: number[]): [string, Selection | undefined][] {
  return [
    ["whole", undefined],
    ["strided", shape.map((n) => (n > 2 ? "1::3" : ":")).join(",")],
    ["partial chunks", shape.map((n) => (n > 2 ? ([1, -1] as const) : null))],
    ["index and ellipsis", "-1, ..."],
    ["steps past the chunks", shape.map((n) => [0, n, Math.max(1, n - 1)] as const)],
  ];
}

describe("slabs the Go client wrote", () => {
  const paths = ["f32", "f64_sharded", "i16", "u8", "i32_be", "f64_be_v2", "i64_sharded", "u64", "bool", "big"];
  for (const path of paths) {
    test(path, async () => {
      const e = entry(path);
      assert.ok(e.written);
      const info = await client.openArray(path);
      assert.deepEqual(info.shape, e.shape);
      assert.equal(info.dtype, e.dtype);
      assert.deepEqual(info.chunks, e.chunks);
      assert.deepEqual(info.shards, e.shards ?? null);
      for (const [name, sel] of selections(e.shape)) {
        // By path (a GetNode first when the selection needs the shape) and by ArrayInfo.
        for (const target of [path, info]) {
          const slab = await client.readSlab(target, sel);
          const want = expected(e, sel);
          assert.equal(slab.data.constructor, kinds[e.dtype], `${name}: TypedArray kind`);
          assert.deepEqual(slab.shape, want.shape, `${name}: shape`);
          assert.equal(slab.dtype, e.dtype);
          assertValues(slab.data, want.values, `${path} ${name} ${JSON.stringify(sel)}`);
        }
      }
    });
  }
});

test("metadata: attributes, codecs, format", async () => {
  const f32 = await client.openArray("f32");
  assert.deepEqual(f32.attributes, { units: "K", n: [1, 2] });
  assert.equal(f32.format, "v3");
  assert.equal(f32.fillValue, 0);
  const be = await client.openArray("i32_be");
  assert.deepEqual(be.codecs, [{ name: "bytes", configuration: { endian: "big" } }]);
  const v2 = await client.openArray("f64_be_v2");
  assert.equal(v2.format, "v2");
  const root = await client.getNode("");
  assert.equal(root.kind, "group");
  assert.equal(root.array, undefined);
});

test("listChildren", async () => {
  const kids = await client.listChildren("grp");
  assert.deepEqual(
    kids.map((n) => [n.path, n.kind]).sort(),
    [
      ["grp/a", "array"],
      ["grp/sub", "group"],
    ],
  );
  const all = await client.listChildren("grp", { recursive: true });
  assert.deepEqual(all.map((n) => n.path).sort(), ["grp/a", "grp/sub", "grp/sub/b"]);
  assert.deepEqual(all.find((n) => n.path === "grp/a")?.array?.shape, [2]);
  await rejectsWith(() => client.listChildren("nope"), Code.NotFound);
});

test("a missing array is NOT_FOUND, a group is not an array", async () => {
  const e = await rejectsWith(() => client.openArray("missing/array"), Code.NotFound, /missing\/array/);
  assert.equal(e.code, 5); // gRPC's NOT_FOUND
  await rejectsWith(() => client.readSlab("missing/array"), Code.NotFound);
  await rejectsWith(() => client.readSlab("missing/array", "0:1"), Code.NotFound);
  await rejectsWith(() => client.openArray("grp"), Code.FailedPrecondition, /group/);
});

test("bad selections are refused before anything is read", async () => {
  const info = await client.openArray("f32");
  await rejectsWith(() => client.readSlab(info, "0:10:-1"), Code.InvalidArgument, /negative steps/);
  await rejectsWith(() => client.readSlab(info, "0:38"), Code.OutOfRange, /dimension 0/);
  await rejectsWith(() => client.readSlab(info, "0,0,0"), Code.InvalidArgument, /3 dimensions/);
  await rejectsWith(() => client.readSlab(info, "a:b"), Code.InvalidArgument, /not an integer/);
  await rejectsWith(() => client.readSlab(info, [0, [1.5, 3]]), Code.InvalidArgument, /not an integer/);
  // An empty selection of a dimension reads an empty slab.
  const empty = await client.readSlab(info, "3:3");
  assert.deepEqual(empty.shape, [0, 53]);
  assert.equal(empty.data.length, 0);
});

test("data types without a TypedArray are refused clearly", async () => {
  await rejectsWith(() => client.readSlab("str"), Code.Unimplemented, /data type string/);
  await rejectsWith(() => client.readSlabBytes("str"), Code.Unimplemented, /data type string/);
  const Float16 = (globalThis as { Float16Array?: Function }).Float16Array;
  if (Float16) {
    const slab = await client.readSlab("f16");
    assert.equal(slab.data.constructor, Float16);
    assert.deepEqual(Array.from(slab.data as unknown as ArrayLike<number>), new Array(10).fill(1.5));
  } else {
    await rejectsWith(() => client.readSlab("f16"), Code.Unimplemented, /Float16Array/);
  }
  // The raw bytes always: 1.5 is 0x3e00 in IEEE half precision.
  const raw = await client.readSlabBytes("f16", "2:5");
  assert.deepEqual(raw.shape, [3]);
  assert.equal(raw.elementSize, 2);
  assert.deepEqual(Array.from(new Uint16Array(raw.bytes.buffer, raw.bytes.byteOffset, 3)), [0x3e00, 0x3e00, 0x3e00]);
});

test("a token-protected server: with the token, and refused without", async () => {
  const tokens = join(dir, "tokens");
  const alice = newToken(tokens, "alice");
  const s = await startServer(join(dir, "root"), ["--tokens", tokens, "--read-only", "--memory-limit", "256MiB"]);
  servers.push(s);
  const slab = await open(s.addr, { token: alice }).readSlab("u8", "10:20");
  assertValues(slab.data, expected(entry("u8"), "10:20").values, "u8 with a token");
  await rejectsWith(() => open(s.addr).openArray("u8"), Code.Unauthenticated);
  await rejectsWith(() => open(s.addr).readSlab("u8"), Code.Unauthenticated);
  await rejectsWith(() => open(s.addr, { token: alice + "x" }).readSlab("u8"), Code.Unauthenticated);
  // A token goes in plaintext only to this host.
  assert.throws(() => connect("example.com:443", { token: alice }), (e: ConnectError) => e.code === Code.InvalidArgument);
});

test("TLS with client certificates", async () => {
  const s = await startServer(join(dir, "root"), [
    "--tls-cert", join(dir, "server.pem"), "--tls-key", join(dir, "server.key"),
    "--client-ca", join(dir, "ca.pem"), "--read-only", "--memory-limit", "256MiB",
  ]);
  servers.push(s);
  const tls = { ca: join(dir, "ca.pem"), cert: join(dir, "client.pem"), key: readFileSync(join(dir, "client.key")) };
  const slab = await open(s.addr, { tls }).readSlab("i64_sharded", "3:9,::4");
  assertValues(slab.data, expected(entry("i64_sharded"), "3:9,::4").values, "i64_sharded over mTLS");
  // Without a client certificate, or without the CA, the server is not reached.
  await rejectsWith(() => open(s.addr, { tls: { ca: tls.ca } }).openArray("u8"), Code.Unavailable, /requires a client certificate/);
  await rejectsWith(() => open(s.addr, { tls: { cert: tls.cert, key: tls.key } }).openArray("u8"), Code.Unavailable, /not trusted/);
});

test("a unix socket", async () => {
  const sock = join(dir, "zarrgate.sock");
  const s = await startServer(join(dir, "root"), ["--read-only", "--memory-limit", "256MiB"], `unix://${sock}`);
  servers.push(s);
  const slab = await open(`unix://${sock}`).readSlab("f64_sharded", "::5,7:30");
  assertValues(slab.data, expected(entry("f64_sharded"), "::5,7:30").values, "f64_sharded over a unix socket");
});
