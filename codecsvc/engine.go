package codecsvc

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
)

// specKey identifies a batch spec, for caching built chains.
func specKey(s *codec.BatchSpec) string {
	var b strings.Builder
	codecs, _ := codecsJSON(s)
	b.WriteString(codecs)
	b.WriteString("|" + s.DataType.Name + "|")
	for _, d := range s.Shape {
		b.WriteString(strconv.FormatInt(d, 10) + ",")
	}
	b.WriteString("|" + string(s.FillValue))
	return b.String()
}

// codecsJSON is s's codecs as JSON: s.CodecsJSON, or marshalled.
func codecsJSON(s *codec.BatchSpec) (string, error) {
	if s.CodecsJSON != "" {
		return s.CodecsJSON, nil
	}
	b, err := json.Marshal(s.Codecs)
	return string(b), err
}

// Local is the in-process engine. Built chains are cached by spec, the
// maxChains most recently used (a chain is pure: it never goes stale). It
// charges no memory budget: its callers (the gateway, the codec worker's
// Server) reserve memory for their batches themselves.
type Local struct {
	Layouts
	limits codec.Limits
	chains *lru.Cache[string, *Chain]
}

// maxChains bounds the chains an engine keeps: one per distinct codec
// chain and chunk layout in use (a gateway's arrays; a codec worker's
// clients' arrays). A chain holds its codecs' configuration, a few KiB at
// most, so the cache stays under a few tens of MiB.
const maxChains = 4096

var _ codec.Engine = (*Local)(nil)

// NewLocal returns an in-process engine under the default limits.
func NewLocal() *Local { return NewLocalLimits(DefaultLimits()) }

// NewLocalLimits returns an in-process engine whose chains are built and
// run under l (zero fields: the defaults).
func NewLocalLimits(l codec.Limits) *Local {
	chains, err := lru.New[string, *Chain](maxChains)
	if err != nil {
		panic(err) // only for a size <= 0
	}
	return &Local{limits: withDefaults(l), chains: chains}
}

// Limits are the limits the engine's chains run under.
func (l *Local) Limits() codec.Limits { return l.limits }

// Chain returns the (cached) chain of a spec. A chunk too large for the
// limits is refused (CheckChunkSize) before anything is allocated for it.
func (l *Local) Chain(spec *codec.BatchSpec) (*Chain, error) {
	k := specKey(spec)
	if c, ok := l.chains.Get(k); ok {
		return c, nil
	}
	shape := make([]int, len(spec.Shape))
	for i, d := range spec.Shape {
		if d < 0 || d > math.MaxInt {
			return nil, errs.New(errs.InvalidArgument, "chunk shape %v: dimension %d out of range", spec.Shape, i)
		}
		shape[i] = int(d)
	}
	c, err := NewChainLimits(spec.Codecs, ChunkSpec{Shape: shape, DataType: spec.DataType, FillValue: spec.FillValue}, l.limits)
	if err != nil {
		return nil, err
	}
	l.chains.Add(k, c)
	return c, nil
}

// Decode implements codec.Engine.
func (l *Local) Decode(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte) ([]Chunk, error) {
	c, err := l.Chain(spec)
	if err != nil {
		return nil, err
	}
	out := make([]Chunk, len(encoded))
	for i, e := range encoded {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if out[i], err = c.Decode(e); err != nil {
			return nil, &codec.ItemError{Index: i, Err: err}
		}
	}
	return out, nil
}

// DecodeSelected implements codec.SelectDecoder: a chunk read in part
// whose chain decodes it to its elements through zstd alone is decoded
// only up to the blocks that hold the selected elements (prefix.go); any
// other is decoded whole and the selection packed from it.
func (l *Local) DecodeSelected(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte, sel []codec.Selection) ([]Chunk, error) {
	if sel == nil {
		return l.Decode(ctx, spec, encoded)
	}
	if len(sel) != len(encoded) {
		return nil, errs.New(errs.InvalidArgument, "decode: %d selections for %d chunks", len(sel), len(encoded))
	}
	if spec.DataType.VariableLength() {
		return nil, errs.New(errs.Unimplemented, "decode: selections of a variable-length data type (%s)", spec.DataType)
	}
	c, err := l.Chain(spec)
	if err != nil {
		return nil, err
	}
	out := make([]Chunk, len(encoded))
	for i, e := range encoded {
		if err := ctx.Err(); err != nil {
			releaseChunks(out[:i])
			return nil, err
		}
		if out[i], err = c.decodeSelected(e, spec, sel[i]); err != nil {
			releaseChunks(out[:i])
			return nil, &codec.ItemError{Index: i, Err: err}
		}
	}
	return out, nil
}

// releaseChunks hands back the buffers of chunks decoded before an error.
func releaseChunks(chunks []Chunk) {
	for _, ch := range chunks {
		ch.Release()
	}
}

// Encode implements codec.Engine.
func (l *Local) Encode(ctx context.Context, spec *codec.BatchSpec, chunks []Chunk) ([][]byte, error) {
	c, err := l.Chain(spec)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(chunks))
	for i, ch := range chunks {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if out[i], err = c.Encode(ch); err != nil {
			return nil, &codec.ItemError{Index: i, Err: err}
		}
	}
	return out, nil
}

// EncodesOwned says every slice Encode returns is the caller's alone: it
// shares no memory with another result, nor with anything this engine
// keeps, only perhaps with the chunk it encodes (a chain without
// compression returns its input). A caller may recycle a result that does
// not overlap its input (internal/bufpool.Put) once done with it: the zstd
// encoders' results are pooled buffers.
func (l *Local) EncodesOwned() bool { return true }

// Layouts answers codec.Layouts from this package's codecs, in process: it
// holds nothing, so its zero value serves. Local embeds it; so does the
// remote engine (codecsvc/remote), whose callers run the shard index chain
// on every partial read of a shard and must not wait on a worker for it.
type Layouts struct{}

var _ codec.Layouts = Layouts{}

// ChunkLayout implements codec.Layouts: CheckChunkSize, and Raw.
func (Layouts) ChunkLayout(spec *codec.BatchSpec, l codec.Limits) (bool, error) {
	if err := CheckChunkSize(chunkSpec(spec), l); err != nil {
		return false, err
	}
	return Raw(spec.Codecs, spec.DataType), nil
}

// ShardLayout implements codec.Layouts: NewShardLimits.
func (Layouts) ShardLayout(spec *codec.BatchSpec, l codec.Limits) (codec.ShardLayout, error) {
	if len(spec.Codecs) != 1 || spec.Codecs[0].Name != "sharding_indexed" {
		return nil, errs.New(errs.InvalidArgument, "a shard layout needs a chain of one sharding_indexed codec, not %d codecs", len(spec.Codecs))
	}
	s, err := NewShardLimits(spec.Codecs[0].Configuration, chunkSpec(spec), l)
	if err != nil {
		return nil, err // not a nil *Shard in a non-nil interface
	}
	return s, nil
}

// LegacyShardLayout implements codec.Layouts: NewLegacyShardLimits.
func (Layouts) LegacyShardLayout(spec *codec.BatchSpec, chunksPerShard []int64, l codec.Limits) (codec.ShardLayout, error) {
	per := make([]int, len(chunksPerShard))
	for i, p := range chunksPerShard {
		per[i] = int(p)
	}
	s, err := NewLegacyShardLimits(spec.Codecs, chunkSpec(spec), per, l)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// chunkSpec is a batch spec's chunk representation, its shape converted
// as it is (CheckChunkSize refuses negative dimensions).
func chunkSpec(spec *codec.BatchSpec) ChunkSpec {
	shape := make([]int, len(spec.Shape))
	for i, d := range spec.Shape {
		shape[i] = int(d)
	}
	return ChunkSpec{Shape: shape, DataType: spec.DataType, FillValue: spec.FillValue}
}
