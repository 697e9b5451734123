// A small typed client of zarrgate's ArrayService over the stubs buf
// generates (src/gen, protoc-gen-es) and Connect-ES's gRPC transport for
// Node (HTTP/2, which grpc-go servers speak): open an array, read a slab
// into a TypedArray, list a group's children.
//
// Errors are ConnectErrors: `code` is the gRPC status code (Code.NotFound
// is 5, as in gRPC) and `rawMessage` the server's message; mistakes found
// here (a bad selection, an unsupported data type, a malformed stream) get
// the codes the Go client gives them.

import { readFileSync } from "node:fs";
import * as net from "node:net";
import { endianness } from "node:os";
import type * as http2 from "node:http2";

import { Code, ConnectError, createClient, type Client as RpcClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

import {
  ArrayService,
  ByteOrder,
  Format,
  NodeKind,
  type Node as PbNode,
  type SlabHeader,
} from "./gen/zarrgate/gateway/v1/gateway_pb.js";
import { resolveSelection, type Selection, type Slice } from "./selection.js";

export { Code, ConnectError };

/** PEM material: a file path (string) or the PEM bytes themselves. */
export type PEM = string | Uint8Array;

export interface TLSOptions {
  /** CA bundle that verifies the server; default: Node's trusted CAs. */
  ca?: PEM;
  /** Client certificate (chain) and key, for servers that require mTLS (--client-ca). */
  cert?: PEM;
  key?: PEM;
  /** The name the server certificate must carry, when not the address's host. */
  serverName?: string;
}

export interface ConnectOptions {
  /** Serve over TLS (the server's --tls-cert); without it, plaintext. */
  tls?: TLSOptions;
  /**
   * Bearer token (from the server's --tokens file, or a JWT), sent as
   * "authorization: Bearer TOKEN" with every call. As the Go client, it is
   * sent in plaintext only to a loopback address or unix socket.
   */
  token?: string;
  /** Deadline of each call in milliseconds; default none (the server's default applies). */
  timeoutMs?: number;
}

export interface Dimension {
  name: string;
  size: number;
  unlimited: boolean;
}

export interface NodeInfo {
  path: string;
  kind: "group" | "array";
  format: "v3" | "v2" | "nczarr";
  /** The node's attributes, parsed from their JSON. */
  attributes: Record<string, unknown>;
  /** Shared dimensions a group declares (NCZarr). */
  dimensions: Dimension[];
  /** Set for arrays. */
  array?: ArrayMeta;
}

export interface ArrayMeta {
  shape: number[];
  /** Zarr v3 data type name: "float32", "int64", "bool", "string", ... */
  dtype: string;
  /** Shape of the (inner) chunks. */
  chunks: number[];
  /** Shape of the shards; null when not sharded. */
  shards: number[] | null;
  /** The codec chain as Zarr v3 "codecs" JSON (v2 filters and compressor normalised into it). */
  codecs: unknown[];
  /** "" for unnamed dimensions. */
  dimensionNames: string[];
  /** The fill value in its v3 JSON form. */
  fillValue: unknown;
}

/** An array: its node and its metadata side by side. */
export type ArrayInfo = Omit<NodeInfo, "array" | "kind"> & ArrayMeta & { kind: "array" };

export type TypedArray =
  | Int8Array
  | Uint8Array
  | Int16Array
  | Uint16Array
  | Int32Array
  | Uint32Array
  | BigInt64Array
  | BigUint64Array
  | Float32Array
  | Float64Array;

/** A slab read by readSlab: its elements in C order, and its shape. */
export interface Slab {
  data: TypedArray;
  shape: number[];
  dtype: string;
}

/** Raw bytes of a slab (readSlabBytes): C order, in this host's byte order. */
export interface SlabBytes {
  bytes: Uint8Array;
  shape: number[];
  dtype: string;
  elementSize: number;
}

export interface CallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}

type TypedArrayCtor = { new (buffer: ArrayBuffer, byteOffset?: number, length?: number): TypedArray; BYTES_PER_ELEMENT: number };

// Float16Array is in newer runtimes only (Node 24 with a flag, later
// without); float16 slabs are readable where it exists.
const Float16 = (globalThis as { Float16Array?: TypedArrayCtor }).Float16Array;

// The TypedArray holding each fixed-size data type; bool as Uint8Array of 0/1.
const typedArrays: Record<string, TypedArrayCtor | undefined> = {
  bool: Uint8Array,
  int8: Int8Array,
  uint8: Uint8Array,
  int16: Int16Array,
  uint16: Uint16Array,
  int32: Int32Array,
  uint32: Uint32Array,
  int64: BigInt64Array,
  uint64: BigUint64Array,
  float16: Float16,
  float32: Float32Array,
  float64: Float64Array,
};

const hostLittleEndian = endianness() === "LE";

/**
 * Opens a client of the zarrgate server at address: "host:port",
 * "[::1]:port" or "unix:///path/to.sock". No I/O happens until the first
 * call; close() ends the connection.
 */
export function connect(address: string, opts: ConnectOptions = {}): Client {
  let baseUrl: string;
  let local: boolean;
  const nodeOptions: http2.SecureClientSessionOptions = {};
  if (address.startsWith("unix://")) {
    const path = address.slice("unix://".length);
    if (!path.startsWith("/")) throw invalid(`address ${address}: want unix:///absolute/path`);
    if (opts.tls) throw invalid(`address ${address}: TLS over a unix socket is not supported`);
    baseUrl = "http://localhost";
    nodeOptions.createConnection = () => net.connect(path);
    local = true;
  } else {
    if (address.includes("://") || address.includes("/")) {
      throw invalid(`address ${address}: want host:port, [ipv6]:port or unix:///path`);
    }
    baseUrl = `${opts.tls ? "https" : "http"}://${address}`;
    let url: URL;
    try {
      url = new URL(baseUrl);
    } catch {
      throw invalid(`address ${address}: want host:port, [ipv6]:port or unix:///path`);
    }
    if (url.port === "") throw invalid(`address ${address}: no port`);
    local = isLoopback(url.hostname);
  }
  if (opts.tls) {
    const { ca, cert, key, serverName } = opts.tls;
    if ((cert === undefined) !== (key === undefined)) throw invalid("tls: cert and key go together");
    if (ca !== undefined) nodeOptions.ca = pem(ca, "tls.ca");
    if (cert !== undefined) nodeOptions.cert = pem(cert, "tls.cert");
    if (key !== undefined) nodeOptions.key = pem(key, "tls.key");
    if (serverName !== undefined) nodeOptions.servername = serverName;
  }
  const interceptors: Interceptor[] = [];
  if (opts.token !== undefined) {
    const token = opts.token;
    if (token === "" || /[\x00-\x20\x7f-\uffff]/.test(token)) {
      throw invalid('token: empty, or with spaces or control characters (is it the whole token, without "Bearer "?)');
    }
    if (!opts.tls && !local) {
      throw invalid(`a token is sent only over TLS (tls option), or in plaintext to a loopback address or unix socket; ${address} is neither`);
    }
    interceptors.push((next) => (req) => {
      req.header.set("authorization", `Bearer ${token}`);
      return next(req);
    });
  }
  // Our own session manager, so that close() can end the connection.
  const session = new Http2SessionManager(baseUrl, {}, nodeOptions);
  const transport = createGrpcTransport({
    baseUrl,
    sessionManager: session,
    interceptors,
    defaultTimeoutMs: opts.timeoutMs,
  });
  return new Client(createClient(ArrayService, transport), session);
}

export class Client {
  /** The generated ArrayService client, for calls this class does not wrap. */
  readonly rpc: RpcClient<typeof ArrayService>;
  readonly #session: Http2SessionManager;

  constructor(rpc: RpcClient<typeof ArrayService>, session: Http2SessionManager) {
    this.rpc = rpc;
    this.#session = session;
  }

  /** Ends the connection; calls in flight fail. */
  close(): void {
    this.#session.abort();
  }

  /** The node (group or array) at path ("" is the root). */
  async getNode(path: string, opts: CallOptions = {}): Promise<NodeInfo> {
    const resp = await call(() => this.rpc.getNode({ path }, opts));
    if (!resp.node) throw dataLoss(`GetNode ${JSON.stringify(path)}: the answer has no node`);
    return nodeInfo(resp.node);
  }

  /** The array at path: shape, dtype, chunks, shards, attributes, ...; FailedPrecondition for a group. */
  async openArray(path: string, opts: CallOptions = {}): Promise<ArrayInfo> {
    const n = await this.getNode(path, opts);
    if (n.kind !== "array" || !n.array) {
      throw new ConnectError(`${JSON.stringify(path)} is a group, not an array`, Code.FailedPrecondition);
    }
    const { array, ...node } = n;
    return { ...node, ...array, kind: "array" };
  }

  /** The children of the group at path, or (recursive) all its descendants. */
  async listChildren(path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<NodeInfo[]> {
    return call(async () => {
      const out: NodeInfo[] = [];
      for await (const resp of this.rpc.listChildren({ path, recursive: opts.recursive ?? false }, opts)) {
        for (const n of resp.nodes) out.push(nodeInfo(n));
      }
      return out;
    });
  }

  /**
   * Reads the slab `selection` (default: all) of an array into a new
   * TypedArray of its data type: Float32Array for float32, BigInt64Array
   * for int64, Uint8Array of 0/1 for bool, ... (float16 needs a runtime
   * with Float16Array; complex, raw r<bits> types: readSlabBytes; string
   * and bytes arrays are refused). Elements are in C order, in this host's
   * byte order, whatever the array's stored byte order. `array` is a path,
   * or an ArrayInfo from openArray (which saves a GetNode when the
   * selection needs the shape).
   */
  async readSlab(array: string | ArrayInfo, selection?: Selection, opts: CallOptions = {}): Promise<Slab> {
    let ctor: TypedArrayCtor | undefined;
    const r = await this.#read(array, selection, opts, (hdr) => {
      ctor = typedArrays[hdr.dataType];
      if (!ctor) throw unsupported(hdr.dataType, pathOf(array));
    });
    const data = new ctor!(r.bytes.buffer as ArrayBuffer, r.bytes.byteOffset, r.bytes.byteLength / r.elementSize);
    return { data, shape: r.shape, dtype: r.dtype };
  }

  /**
   * Reads a slab of any fixed-size data type as bytes (complex64 as pairs
   * of float32, r<bits> as they are stored, float16 without Float16Array):
   * C order, each element in this host's byte order. String and bytes
   * arrays are refused (Unimplemented).
   */
  async readSlabBytes(array: string | ArrayInfo, selection?: Selection, opts: CallOptions = {}): Promise<SlabBytes> {
    return this.#read(array, selection, opts, () => {});
  }

  // #read streams a ReadSlab into one buffer allocated from its header:
  // each block is copied, row by row, straight from the message it arrived
  // in to its place in the result (protobuf-es hands out bytes fields as
  // views of the received message), so no message is kept once placed.
  async #read(
    array: string | ArrayInfo,
    selection: Selection | undefined,
    opts: CallOptions,
    check: (hdr: SlabHeader) => void,
  ): Promise<SlabBytes> {
    const path = pathOf(array);
    let slices: Slice[] = [];
    if (selection !== undefined && !(typeof selection === "string" && selection.trim() === "")) {
      const info = typeof array === "string" ? await this.openArray(path, opts) : array;
      slices = resolveSelection(selection, info.shape);
    }
    const request = {
      path,
      selection: slices.map((s) => ({ start: BigInt(s.start), stop: BigInt(s.stop), step: BigInt(s.step) })),
    };
    // Ends the call when we stop early (a bad block, a refused type).
    const ac = new AbortController();
    const signal = opts.signal ? AbortSignal.any([opts.signal, ac.signal]) : ac.signal;
    let shape: number[] | undefined;
    let dtype = "";
    let elem = 0;
    let out: Uint8Array | undefined;
    let want = 0;
    let got = 0;
    try {
      for await (const msg of this.rpc.readSlab(request, { signal, timeoutMs: opts.timeoutMs })) {
        const m = msg.message;
        if (m.case === "header") {
          if (shape) throw dataLoss(`read ${path}: a second header`);
          const hdr = m.value;
          shape = hdr.shape.map((v) => num(v, "slab shape"));
          dtype = hdr.dataType;
          elem = hdr.elementSize;
          if (elem === 0) throw unsupported(dtype, path);
          check(hdr);
          const ctor = typedArrays[dtype];
          if (ctor && ctor.BYTES_PER_ELEMENT !== elem) {
            throw dataLoss(`read ${path}: ${dtype} elements of ${elem} bytes`);
          }
          if (hdr.byteOrder !== ByteOrder.LITTLE_ENDIAN) {
            throw dataLoss(`read ${path}: block data in byte order ${hdr.byteOrder}, want little-endian`);
          }
          want = shape.reduce((a, b) => a * b, 1);
          out = allocate(want, elem, path);
        } else if (m.case === "block") {
          if (!shape || !out) throw dataLoss(`read ${path}: a block before the header`);
          const b = m.value;
          const origin = b.origin.map((v) => num(v, "block origin"));
          const bshape = b.shape.map((v) => num(v, "block shape"));
          checkBlock(path, shape, origin, bshape, b.data.length, elem);
          placeBlock(out, shape, origin, bshape, b.data, elem);
          got += bshape.reduce((a, v) => a * v, 1);
        } else {
          throw dataLoss(`read ${path}: a message that is neither header nor block`);
        }
      }
    } catch (e) {
      ac.abort();
      throw asConnectError(e);
    }
    if (!shape || !out) throw dataLoss(`read ${path}: the stream ended before the header`);
    if (got !== want) throw dataLoss(`read ${path}: the server sent ${got} of ${want} elements`);
    // Complex numbers are pairs of floats, each swapped; raw r<bits>
    // elements are bytes with no order.
    if (!hostLittleEndian) swapBytes(out, dtype.startsWith("complex") ? elem / 2 : dtype.startsWith("r") ? 1 : elem);
    return { bytes: out, shape, dtype, elementSize: elem };
  }
}

function allocate(n: number, elem: number, path: string): Uint8Array {
  const bytes = n * elem;
  try {
    if (!Number.isSafeInteger(bytes)) throw new RangeError("too large");
    return new Uint8Array(bytes);
  } catch {
    throw new ConnectError(
      `read ${path}: a slab of ${n} elements (${bytes} bytes) does not fit one TypedArray here; read it in parts`,
      Code.ResourceExhausted,
    );
  }
}

// checkBlock checks that a block lies inside the slab and that its data
// has the block's size, so that placing it cannot write out of place.
function checkBlock(path: string, shape: number[], origin: number[], bshape: number[], len: number, elem: number): void {
  const nd = shape.length;
  if (origin.length !== nd || bshape.length !== nd) {
    throw dataLoss(`read ${path}: block rank ${origin.length}, slab rank ${nd}`);
  }
  for (let d = 0; d < nd; d++) {
    if (origin[d] > shape[d] || bshape[d] > shape[d] - origin[d]) {
      throw dataLoss(`read ${path}: block at [${origin}] shape [${bshape}] outside the slab [${shape}]`);
    }
  }
  const want = bshape.reduce((a, v) => a * v, 1) * elem;
  if (len !== want) throw dataLoss(`read ${path}: block at [${origin}] has ${len} bytes, want ${want}`);
}

/**
 * Copies a block (elements in C order) into a dense C-order slab of the
 * given shape: one copy per row, a row running over the trailing
 * dimensions the block spans whole. The block has been checked.
 */
export function placeBlock(
  out: Uint8Array,
  shape: readonly number[],
  origin: readonly number[],
  bshape: readonly number[],
  data: Uint8Array,
  elem: number,
): void {
  const nd = shape.length;
  if (bshape.some((v) => v === 0)) return;
  let run = nd;
  let rowBytes = elem;
  while (run > 0) {
    rowBytes *= bshape[run - 1];
    run--;
    if (bshape[run] !== shape[run]) break;
  }
  const strides = new Array<number>(nd);
  let acc = elem;
  for (let d = nd - 1; d >= 0; d--) {
    strides[d] = acc;
    acc *= shape[d];
  }
  const idx = new Array<number>(nd).fill(0);
  let src = 0;
  for (;;) {
    let off = 0;
    for (let d = 0; d < nd; d++) off += (origin[d] + idx[d]) * strides[d];
    out.set(data.subarray(src, src + rowBytes), off);
    src += rowBytes;
    let d = run - 1;
    for (; d >= 0; d--) {
      if (++idx[d] < bshape[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

/** Reverses the bytes of each element: the wire's little-endian to a big-endian host's order. */
export function swapBytes(b: Uint8Array, elem: number): void {
  if (elem <= 1) return;
  for (let i = 0; i < b.length; i += elem) b.subarray(i, i + elem).reverse();
}

function nodeInfo(n: PbNode): NodeInfo {
  const info: NodeInfo = {
    path: n.path,
    kind: n.kind === NodeKind.ARRAY ? "array" : "group",
    format: n.format === Format.ZARR_V2 ? "v2" : n.format === Format.NCZARR ? "nczarr" : "v3",
    attributes: parseJSON(n.attributesJson, {}, n.path, "attributes") as Record<string, unknown>,
    dimensions: n.dimensions.map((d) => ({ name: d.name, size: num(d.size, "dimension size"), unlimited: d.unlimited })),
  };
  const a = n.array;
  if (n.kind === NodeKind.ARRAY && a) {
    info.array = {
      shape: a.shape.map((v) => num(v, "shape")),
      dtype: a.dataType,
      chunks: a.chunkShape.map((v) => num(v, "chunk shape")),
      shards: a.shardShape.length ? a.shardShape.map((v) => num(v, "shard shape")) : null,
      codecs: parseJSON(a.codecsJson, [], n.path, "codecs") as unknown[],
      dimensionNames: [...a.dimensionNames],
      fillValue: parseJSON(a.fillValueJson, null, n.path, "fill value"),
    };
  }
  return info;
}

function parseJSON(s: string, empty: unknown, path: string, what: string): unknown {
  if (s === "") return empty;
  try {
    return JSON.parse(s);
  } catch {
    throw dataLoss(`node ${JSON.stringify(path)}: ${what} are not JSON`);
  }
}

// num converts a uint64 of the wire to a number, refusing what a number
// cannot hold exactly.
function num(v: bigint, what: string): number {
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw dataLoss(`${what} ${v} is larger than a JavaScript number holds exactly`);
  return Number(v);
}

function pathOf(a: string | ArrayInfo): string {
  return typeof a === "string" ? a : a.path;
}

function pem(v: PEM, what: string): Buffer {
  if (typeof v !== "string") return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  try {
    return readFileSync(v);
  } catch (e) {
    throw invalid(`${what}: ${(e as Error).message}`);
  }
}

function isLoopback(host: string): boolean {
  return host === "localhost" || host === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

function unsupported(dtype: string, path: string): ConnectError {
  const why =
    dtype === "float16"
      ? "float16 needs Float16Array, which this runtime lacks; readSlabBytes returns its raw bytes"
      : dtype === "string" || dtype === "bytes"
        ? "variable-length types have no TypedArray and this client does not read them"
        : "it has no TypedArray; readSlabBytes returns its raw bytes";
  return new ConnectError(`read ${path}: data type ${dtype}: ${why}`, Code.Unimplemented);
}

function invalid(msg: string): ConnectError {
  return new ConnectError(msg, Code.InvalidArgument);
}

function dataLoss(msg: string): ConnectError {
  return new ConnectError(msg, Code.DataLoss);
}

// asConnectError makes every failure a ConnectError. Connect-ES reports a
// TLS handshake that failed (a certificate the client does not trust, or
// one the server wanted and did not get) as Internal; the server was never
// reached, so it is Unavailable here, as in the Go client, with a hint.
function asConnectError(e: unknown): ConnectError {
  const ce = ConnectError.from(e);
  const cause = ce.cause as { code?: unknown } | undefined;
  const sys = typeof cause?.code === "string" ? cause.code : "";
  if ((ce.code === Code.Internal || ce.code === Code.Unknown) && /^ERR_SSL_|^ERR_TLS_|CERT|SIGNATURE/.test(sys)) {
    let hint = "";
    if (/CERTIFICATE_REQUIRED/.test(sys)) hint = " (the server requires a client certificate: tls.cert and tls.key)";
    else if (/VERIFY|CERT|SIGNATURE/.test(sys)) hint = " (the server's certificate is not trusted: tls.ca)";
    return new ConnectError(`TLS handshake: ${ce.rawMessage}${hint}`, Code.Unavailable, undefined, undefined, ce.cause);
  }
  return ce;
}

async function call<T>(f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    throw asConnectError(e);
  }
}
