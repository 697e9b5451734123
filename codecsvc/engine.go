package codecsvc

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

// BatchSpec describes the chunks of a batch: the codec chain and the
// decoded chunk layout.
type BatchSpec struct {
	Codecs    []zarr.CodecSpec
	Shape     []int64
	DataType  zarr.DataType
	FillValue []byte
}

// key identifies a spec, for caching built chains.
func (s *BatchSpec) key() string {
	var b strings.Builder
	codecs, _ := json.Marshal(s.Codecs)
	b.Write(codecs)
	b.WriteString("|" + s.DataType.Name + "|")
	for _, d := range s.Shape {
		b.WriteString(strconv.FormatInt(d, 10) + ",")
	}
	b.WriteString("|" + string(s.FillValue))
	return b.String()
}

// Engine encodes and decodes batches of chunks of one array. Local runs
// them in this process; the remote client (package codecsvc/remote) on
// codec workers. A failure on one item fails the batch with an error
// wrapping *ItemError, which says which item.
type Engine interface {
	Decode(ctx context.Context, spec *BatchSpec, encoded [][]byte) ([]Chunk, error)
	Encode(ctx context.Context, spec *BatchSpec, chunks []Chunk) ([][]byte, error)
}

// ItemError is a codec failure on one item of a batch.
type ItemError struct {
	Index int
	Err   error
}

func (e *ItemError) Error() string { return fmt.Sprintf("chunk %d of the batch: %v", e.Index, e.Err) }

// Unwrap returns the codec's error, which carries the gRPC code.
func (e *ItemError) Unwrap() error { return e.Err }

// Local is the in-process engine. Built chains are cached by spec, the
// maxChains most recently used (a chain is pure: it never goes stale). It
// charges no memory budget: its callers (the gateway, the codec worker's
// Server) reserve memory for their batches themselves.
type Local struct {
	limits Limits
	chains *lru.Cache[string, *Chain]
}

// maxChains bounds the chains an engine keeps: one per distinct codec
// chain and chunk layout in use (a gateway's arrays; a codec worker's
// clients' arrays). A chain holds its codecs' configuration, a few KiB at
// most, so the cache stays under a few tens of MiB.
const maxChains = 4096

var _ Engine = (*Local)(nil)

// NewLocal returns an in-process engine under the default limits.
func NewLocal() *Local { return NewLocalLimits(DefaultLimits()) }

// NewLocalLimits returns an in-process engine whose chains are built and
// run under l (zero fields: the defaults).
func NewLocalLimits(l Limits) *Local {
	chains, err := lru.New[string, *Chain](maxChains)
	if err != nil {
		panic(err) // only for a size <= 0
	}
	return &Local{limits: l.withDefaults(), chains: chains}
}

// Limits are the limits the engine's chains run under.
func (l *Local) Limits() Limits { return l.limits }

// Chain returns the (cached) chain of a spec. A chunk too large for the
// limits is refused (CheckChunkSize) before anything is allocated for it.
func (l *Local) Chain(spec *BatchSpec) (*Chain, error) {
	k := spec.key()
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

// Decode implements Engine.
func (l *Local) Decode(ctx context.Context, spec *BatchSpec, encoded [][]byte) ([]Chunk, error) {
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
			return nil, &ItemError{Index: i, Err: err}
		}
	}
	return out, nil
}

// Encode implements Engine.
func (l *Local) Encode(ctx context.Context, spec *BatchSpec, chunks []Chunk) ([][]byte, error) {
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
			return nil, &ItemError{Index: i, Err: err}
		}
	}
	return out, nil
}
