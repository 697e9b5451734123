package remote

import (
	"bytes"
	"context"
	"sync/atomic"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
)

// Costs are the measured costs of offloading's cost model
// (docs/architecture.md, "Offloading codecs"), in nanoseconds of the
// caller's CPU: per byte it sends or receives on the codec hop, and per
// decoded byte each codec costs to decode in process.
type Costs struct {
	HopPerByte float64
	// SharedHopPerByte is what offloading costs the caller per encoded
	// byte when every stream has a shared-memory segment (shared.go): it
	// copies the encoded chunks into the segment, and the answers are lent
	// from it, costing nothing per selected byte.
	SharedHopPerByte float64
	// StorePerByte is what reading an encoded byte from the store tier
	// costs the caller: what worker-fetch spares it.
	StorePerByte float64
	// DecodePerByte is by codec name; codecs not named cost Default.
	DecodePerByte map[string]float64
	Default       float64
}

// DefaultCosts are the costs measured on loopback on a 2-core Xeon VM
// (docs/benchmarks.md): ≈ 0.35 ns per byte at each end of the hop
// (BenchmarkOffloadOverhead), ≈ 0.12 ns per encoded byte for the caller
// with shared memory (its copy of each encoded chunk into the segment,
// ≈ 30 µs per 256 KiB in the profile of shm-batch=16), a read from the
// store tier taken as the same as the hop, and the decode costs of each codec on one core, medians of
// three runs of
//
//	go test -run '^$' -bench DecodeCosts -cpu 1 -count 3 ./codecsvc/
//
// on 2026-11-26 (machine shared; CPU time per decoded byte, of 4 MiB of
// float32 that compress poorly: zstd and gzip cost more per byte on data
// that compresses well). Codecs not measured (bz2, lzma, the other
// numcodecs filters...) cost 1 ns per byte. "bytes/big" is the bytes
// codec with big-endian elements of more than one byte (a byte swap; a
// little-endian one decodes by aliasing): 0.5 measured so, 0.18 since the
// swap goes a word at a time, in place after a decoder (2.8× cheaper
// measured side by side on a 2-core EPYC VM, 0.22 → 0.079, 2026-11-27).
// gzip and zlib: 5.9 and 6.3 measured so, 4.4 and 4.7 since the pure-Go
// build decodes DEFLATE with its own decoder (goInflate: 3.50–3.59 →
// 2.59–2.68 and 3.72–3.78 → 2.81–2.82 side by side on that VM).
func DefaultCosts() Costs {
	return Costs{HopPerByte: 0.35, SharedHopPerByte: 0.12, StorePerByte: 0.35, Default: 1, DecodePerByte: map[string]float64{
		"bytes": 0, "bytes/big": 0.18, "transpose": 0.92, "crc32c": 0.06, "numcodecs.crc32c": 0.06, "numcodecs.crc32": 0.04,
		"zstd": 0.99, "numcodecs.zstd": 1.06, "gzip": 4.4, "numcodecs.gzip": 4.4, "numcodecs.zlib": 4.7,
		"blosc": 0.22, "numcodecs.lz4": 0.34, "numcodecs.shuffle": 0.23,
	}}
}

// decodeCost is what decoding d bytes of spec costs in process.
func (c Costs) decodeCost(spec *codec.BatchSpec, d int64) float64 {
	per := 0.0
	for _, cs := range spec.Codecs {
		name := cs.Name
		if _, ok := c.DecodePerByte["bytes/big"]; ok && name == "bytes" && spec.DataType.Size > 1 && bytes.Contains(cs.Configuration, []byte(`"big"`)) {
			name = "bytes/big"
		}
		v, ok := c.DecodePerByte[name]
		if !ok {
			v = c.Default
		}
		per += v
	}
	return per * float64(d)
}

// Auto is a codec engine that chooses, per decode batch, between decoding
// in process and offloading to codec workers, by the cost model: it
// offloads when decoding the batch here would cost more of this process's
// CPU than moving it over the hop (the encoded bytes there, the decoded or
// selected bytes back). Encoding always goes to the workers (encoders cost
// more than decoders, and writes are not latency-bound). Layouts are
// answered in process, as by the remote engine.
type Auto struct {
	codecsvc.Layouts
	local  *codecsvc.Local
	remote *Client
	costs  Costs

	offloaded, embedded, fetched atomic.Uint64
}

var (
	_ codec.Engine        = (*Auto)(nil)
	_ codec.SelectDecoder = (*Auto)(nil)
	_ codec.FetchChooser  = (*Auto)(nil)
)

// NewAuto returns an engine choosing between local and remote by costs.
func NewAuto(local *codecsvc.Local, remote *Client, costs Costs) *Auto {
	return &Auto{local: local, remote: remote, costs: costs}
}

// Batches reports how many decode batches were offloaded and how many
// decoded in process.
func (a *Auto) Batches() (offloaded, embedded uint64) {
	return a.offloaded.Load(), a.embedded.Load()
}

// Fetched reports how many decode batches went to the workers as keys
// (worker-fetch: PreferFetch said so).
func (a *Auto) Fetched() uint64 { return a.fetched.Load() }

// PreferFetch implements codec.FetchChooser: worker-fetch costs the
// caller only the selected bytes back over the codec hop; reading the
// batch and decoding it here costs the stored bytes from the store tier
// and the decode. Sizes not known before the read (the stored size of
// unsharded chunks, anything of variable-length types) are taken as the
// decoded size, which compares the two per byte. On a tie the batch is
// decoded here (one hop fewer).
func (a *Auto) PreferFetch(spec *codec.BatchSpec, n int, stored, selected int64) bool {
	d := int64(n) * wholeSize(spec)
	if spec.DataType.VariableLength() {
		d, stored, selected = int64(n), int64(n), int64(n) // per byte
	}
	if stored < 0 {
		stored = d
	}
	here := a.costs.StorePerByte*float64(stored) + a.costs.decodeCost(spec, d)
	if a.costs.HopPerByte*float64(selected) < here {
		a.fetched.Add(1)
		return true
	}
	return false
}

// DecodeFetched implements codec.FetchDecoder: on the workers.
func (a *Auto) DecodeFetched(ctx context.Context, spec *codec.BatchSpec, refs []codec.Ref, sel []codec.Selection) ([]codec.Chunk, []bool, error) {
	return a.remote.DecodeFetched(ctx, spec, refs, sel)
}

// offload applies the model to a batch of encoded chunks of spec of which
// selected decoded bytes are wanted back.
func (a *Auto) offload(spec *codec.BatchSpec, encoded [][]byte, selected int64) bool {
	var e int64
	for _, b := range encoded {
		e += int64(len(b))
	}
	d := int64(len(encoded)) * wholeSize(spec)
	if spec.DataType.VariableLength() {
		d = e // no size before decoding: assume the stored size
		selected = e
	}
	hop := a.costs.HopPerByte * float64(e+selected)
	if a.costs.SharedHopPerByte > 0 && a.remote.allShared() {
		hop = a.costs.SharedHopPerByte * float64(e)
	}
	if a.costs.decodeCost(spec, d) > hop {
		a.offloaded.Add(1)
		return true
	}
	a.embedded.Add(1)
	return false
}

func wholeSize(spec *codec.BatchSpec) int64 {
	n := int64(spec.DataType.Size)
	for _, d := range spec.Shape {
		n *= d
	}
	return n
}

// Decode implements codec.Engine.
func (a *Auto) Decode(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte) ([]codec.Chunk, error) {
	if a.offload(spec, encoded, int64(len(encoded))*wholeSize(spec)) {
		return a.remote.Decode(ctx, spec, encoded)
	}
	return a.local.Decode(ctx, spec, encoded)
}

// DecodeSelected implements codec.SelectDecoder: offloaded, the workers
// answer with the selections; in process, codecsvc.Local.DecodeSelected
// (zstd chunks decoded only as far as their selections need).
func (a *Auto) DecodeSelected(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte, sel []codec.Selection) ([]codec.Chunk, error) {
	var s int64
	elem := spec.DataType.Size
	for _, x := range sel {
		if x.Whole() {
			s += wholeSize(spec)
		} else {
			s += x.Elems() * int64(elem)
		}
	}
	if a.offload(spec, encoded, s) {
		return a.remote.DecodeSelected(ctx, spec, encoded, sel)
	}
	return a.local.DecodeSelected(ctx, spec, encoded, sel)
}

// Encode implements codec.Engine: on the workers.
func (a *Auto) Encode(ctx context.Context, spec *codec.BatchSpec, chunks []codec.Chunk) ([][]byte, error) {
	return a.remote.Encode(ctx, spec, chunks)
}
