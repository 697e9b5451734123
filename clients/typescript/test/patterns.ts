// The values test/gowriter writes: the element at flat C-order index i of
// an array of each data type (gowriter's pattern, computed independently).

export type Value = number | bigint;

export const patterns: Record<string, (i: number) => Value> = {
  float32: (i) => Math.fround(i * 0.5 - 100),
  float64: (i) => i / 3 - 1e6,
  int16: (i) => ((i * 7 - 30000) << 16) >> 16,
  uint8: (i) => (i * 13) & 255,
  int32: (i) => (i * 100003 - 2 ** 30) | 0,
  int64: (i) => BigInt.asIntN(64, (BigInt(i) << 33n) + BigInt(i) - (1n << 62n)),
  uint64: (i) => BigInt.asUintN(64, (1n << 63n) + BigInt(i) * 3n),
  bool: (i) => (i % 3 === 0 ? 1 : 0),
};
