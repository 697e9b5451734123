// Selections as NumPy writes them, resolved against an array's shape into
// the (start, stop, step) slices ReadSlab takes. The rules are the Go
// client's (client.ParseSelection) and the CLI's: negative indices count
// from the end, steps are positive, and a bound past the end is an error
// rather than clipped, so that a mistyped selection never silently reads
// less.

import { Code, ConnectError } from "@connectrpc/connect";

/** One dimension of a selection: start, start+step, ... below stop. */
export interface Slice {
  start: number;
  stop: number;
  step: number;
}

/**
 * An item of a selection given as an array: an index (negative counts from
 * the end; the dimension is kept, with length 1), `null` or `":"` for the
 * whole dimension, `[start, stop]` or `[start, stop, step]` (a `null` bound
 * is left out, as in `a[:5]`), or `"..."` for the dimensions not named.
 */
export type SelectionItem =
  | number
  | null
  | ":"
  | "..."
  | readonly [number | null, number | null]
  | readonly [number | null, number | null, number | null];

/**
 * A selection: NumPy's text form (`"0, 100:103, 200:210:2"`, `"...,-1"`),
 * or one item per dimension. Dimensions after the last item are selected
 * whole. Omitted (undefined or ""), the whole array.
 */
export type Selection = string | readonly SelectionItem[];

interface Item {
  index: boolean;
  start: number | null;
  stop: number | null;
  step: number | null;
}

function invalid(msg: string): ConnectError {
  return new ConnectError(msg, Code.InvalidArgument);
}

function outOfRange(msg: string): ConnectError {
  return new ConnectError(msg, Code.OutOfRange);
}

function checkInt(v: number | null, what: string): number | null {
  if (v !== null && !Number.isSafeInteger(v)) {
    throw invalid(`${what} ${v} is not an integer`);
  }
  return v;
}

function checkStep(it: Item): Item {
  if (it.step !== null && it.step < 1) {
    throw invalid(
      it.step === 0
        ? "step must be at least 1"
        : `step ${it.step}: negative steps are not supported (steps must be positive; select forward and reverse the result)`,
    );
  }
  return it;
}

function parseText(p: string): Item | "..." {
  p = p.trim();
  if (p === "...") return "...";
  if (p === "") throw invalid("empty; use ':' for the whole dimension");
  const fields = p.split(":");
  if (fields.length > 3) throw invalid("want an index, start:stop or start:stop:step");
  const names = fields.length === 1 ? ["index"] : ["start", "stop", "step"];
  const vals = fields.map((f, i) => {
    f = f.trim();
    if (f === "") return null;
    if (!/^[+-]?\d+$/.test(f)) throw invalid(`${names[i]} "${f}" is not an integer`);
    return checkInt(Number(f), names[i]);
  });
  return checkStep({ index: fields.length === 1, start: vals[0], stop: vals[1] ?? null, step: vals[2] ?? null });
}

function fromItem(x: SelectionItem): Item | "..." {
  if (x === "...") return "...";
  if (x === null || x === ":") return { index: false, start: null, stop: null, step: null };
  if (typeof x === "number") return { index: true, start: checkInt(x, "index"), stop: null, step: null };
  if (Array.isArray(x) && (x.length === 2 || x.length === 3)) {
    return checkStep({
      index: false,
      start: checkInt(x[0], "start"),
      stop: checkInt(x[1], "stop"),
      step: checkInt(x[2] ?? null, "step"),
    });
  }
  throw invalid(`selection item ${JSON.stringify(x)}: want an index, null, ":", "...", [start, stop] or [start, stop, step]`);
}

function resolveItem(it: Item, n: number): Slice {
  if (it.index) {
    let i = it.start as number;
    if (i < -n || i >= n) {
      throw outOfRange(
        n === 0
          ? `index ${i}: the dimension is empty (length 0)`
          : `index ${i} is outside the dimension's length ${n} (valid: ${-n} to ${n - 1})`,
      );
    }
    if (i < 0) i += n;
    return { start: i, stop: i + 1, step: 1 };
  }
  const bound = (name: string, v: number | null, def: number): number => {
    if (v === null) return def;
    if (v < -n || v > n) {
      throw outOfRange(`${name} ${v} is outside the dimension's length ${n} (valid: ${-n} to ${n})`);
    }
    return v < 0 ? v + n : v;
  };
  const start = bound("start", it.start, 0);
  const stop = bound("stop", it.stop, n);
  if (start > stop) {
    throw outOfRange(`start ${it.start} is after stop ${it.stop}: slices run forward (start <= stop; steps are positive)`);
  }
  return { start, stop, step: it.step ?? 1 };
}

/**
 * Resolves a selection against an array's shape into one slice per
 * dimension. Malformed items and negative steps are InvalidArgument,
 * bounds outside the array OutOfRange (ConnectError codes); each message
 * names the dimension.
 */
export function resolveSelection(sel: Selection | undefined, shape: readonly number[]): Slice[] {
  let items: (Item | "...")[];
  let texts: string[];
  if (sel === undefined || (typeof sel === "string" && sel.trim() === "")) {
    items = [];
    texts = [];
  } else if (typeof sel === "string") {
    texts = sel.split(",").map((s) => s.trim());
    items = texts.map((t, i) => wrap(i, t, () => parseText(t)));
  } else {
    texts = sel.map((x) => JSON.stringify(x));
    items = sel.map((x, i) => wrap(i, texts[i], () => fromItem(x)));
  }
  const ellipsis = items.indexOf("...");
  if (ellipsis >= 0 && items.indexOf("...", ellipsis + 1) >= 0) {
    throw invalid(`selection ${JSON.stringify(sel)}: "..." may appear only once`);
  }
  const named = items.length - (ellipsis >= 0 ? 1 : 0);
  if (named > shape.length) {
    throw invalid(
      `selection ${JSON.stringify(sel)} names ${named} dimensions, but the array has ${shape.length} (shape [${shape.join(", ")}])`,
    );
  }
  const out: Slice[] = shape.map((n) => ({ start: 0, stop: n, step: 1 }));
  items.forEach((it, i) => {
    if (it === "...") return;
    // Items after "..." count from the last dimension.
    const d = ellipsis >= 0 && i > ellipsis ? shape.length - (items.length - i) : i;
    out[d] = wrap(d, texts[i], () => resolveItem(it, shape[d]));
  });
  return out;
}

function wrap<T>(d: number, text: string, f: () => T): T {
  try {
    return f();
  } catch (e) {
    if (e instanceof ConnectError) {
      throw new ConnectError(`selection dimension ${d} (${text}): ${e.rawMessage}`, e.code);
    }
    throw e;
  }
}

/** The output shape of resolved slices. */
export function sliceShape(sel: readonly Slice[]): number[] {
  return sel.map((s) => (s.stop > s.start ? Math.ceil((s.stop - s.start) / s.step) : 0));
}
