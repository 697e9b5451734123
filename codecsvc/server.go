package codecsvc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/shm"
	"github.com/zarrgate/zarrgate/internal/tracing"
	"github.com/zarrgate/zarrgate/internal/wire"
	"github.com/zarrgate/zarrgate/zarr"
)

// Server serves a codec.Engine as zarrgate.codec.v1.CodecService: the codec
// worker.
type Server struct {
	codecv1.UnimplementedCodecServiceServer
	e codec.Engine
	// local is e when it runs in this process: its chains tell the memory
	// a batch needs before it is decoded or encoded.
	local *Local
	// budget is charged with each batch's memory (nil: nothing charged).
	budget *membudget.Budget
	// inflight bounds the batches a Process stream works on at once.
	inflight int
	// obs, when set, is told of every batch (SetObserver).
	obs codec.Observer
	// fetch, when set, reads batches given as keys (SetFetcher).
	fetch Fetcher
	// drain is closed when the worker starts shutting down (Drain): every
	// Process stream, open or opened later, is told so.
	drain     chan struct{}
	drainOnce sync.Once
	streams   atomic.Int64 // Process streams open
	// noShared declines every shared-memory offer (SetSharedMemory).
	noShared bool
}

// SetObserver has o told of every batch the service decodes or encodes
// (for metrics). Call it before serving.
func (s *Server) SetObserver(o codec.Observer) { s.obs = o }

// NewServer returns the CodecService of e, charging no memory budget.
func NewServer(e codec.Engine) *Server {
	s := &Server{e: e, inflight: 2 * runtime.GOMAXPROCS(0), drain: make(chan struct{})}
	s.local, _ = e.(*Local)
	return s
}

// NewBudgetServer returns the CodecService of a local engine that reserves
// each batch's memory against b before decoding or encoding it: the
// request's bytes, the results at their bound (a fixed-size chunk's exact
// size; for variable-length data the offsets and, one chunk at a time,
// the limit on element bytes) and one chunk's working buffers. What is
// left after the batch is what its results hold; it is released once the
// response is written (Process) or handed to gRPC (Decode, Encode). A
// batch that cannot fit in the budget is ResourceExhausted naming the
// limit, at once; one that must wait for memory waits, first come first
// served, for the budget's MaxWait at most, and only while it holds none
// (see grant).
func NewBudgetServer(l *Local, b *membudget.Budget) *Server {
	s := NewServer(l)
	s.budget = b
	return s
}

// Register registers the service.
func (s *Server) Register(r grpc.ServiceRegistrar) { codecv1.RegisterCodecServiceServer(r, s) }

// SpecToProto converts a batch spec for the wire.
func SpecToProto(s *codec.BatchSpec) (*codecv1.ChunkSpec, error) {
	codecs, err := codecsJSON(s)
	if err != nil {
		return nil, err
	}
	shape := make([]uint64, len(s.Shape))
	for i, d := range s.Shape {
		shape[i] = uint64(d)
	}
	return &codecv1.ChunkSpec{DataType: s.DataType.Name, ChunkShape: shape, FillValue: s.FillValue, CodecsJson: codecs}, nil
}

// SpecFromProto converts a spec from the wire.
func SpecFromProto(p *codecv1.ChunkSpec) (*codec.BatchSpec, error) {
	dt, err := zarr.ParseDataType(p.GetDataType())
	if err != nil {
		return nil, err
	}
	codecs, err := parseCodecs(p.GetCodecsJson())
	if err != nil {
		return nil, err
	}
	s := &codec.BatchSpec{Codecs: codecs, CodecsJSON: p.GetCodecsJson(), DataType: dt, FillValue: p.GetFillValue(), Shape: make([]int64, len(p.GetChunkShape()))}
	elems := uint64(1)
	for i, d := range p.GetChunkShape() {
		if d > 1<<40 {
			return nil, errs.New(errs.InvalidArgument, "chunk_shape dimension %d: %d is too large", i, d)
		}
		if d != 0 && elems > math.MaxInt64/d {
			return nil, errs.New(errs.InvalidArgument, "chunk_shape %v: the number of elements overflows", p.GetChunkShape())
		}
		elems *= d
		s.Shape[i] = int64(d)
	}
	// The limits (CheckChunkSize) are the engine's to apply: Local.Chain.
	return s, nil
}

// A worker sees the same few codec chains batch after batch: their JSON
// is parsed once (≈ 20 µs a batch in the profile of a batch of one
// chunk), and kept by its text, for chains of up to parsedCodecsKey
// bytes, parsedCodecsMax of them (all forgotten when full).
const (
	parsedCodecsKey = 4 << 10
	parsedCodecsMax = 256
)

var parsedCodecs struct {
	sync.Mutex
	m map[string][]zarr.CodecSpec
}

// parseCodecs parses a ChunkSpec's codecs_json. The slice returned is
// the caller's; its configurations are shared, read-only.
func parseCodecs(js string) ([]zarr.CodecSpec, error) {
	if len(js) <= parsedCodecsKey {
		parsedCodecs.Lock()
		c, ok := parsedCodecs.m[js]
		parsedCodecs.Unlock()
		if ok {
			return slices.Clone(c), nil
		}
	}
	var codecs []zarr.CodecSpec
	if err := json.Unmarshal([]byte(js), &codecs); err != nil {
		return nil, errs.New(errs.InvalidArgument, "codecs_json: not a JSON array of codecs: %v", err)
	}
	if len(js) <= parsedCodecsKey {
		parsedCodecs.Lock()
		if parsedCodecs.m == nil || len(parsedCodecs.m) >= parsedCodecsMax {
			parsedCodecs.m = make(map[string][]zarr.CodecSpec)
		}
		parsedCodecs.m[js] = slices.Clone(codecs)
		parsedCodecs.Unlock()
	}
	return codecs, nil
}

// ChunksToProto converts decoded chunks for the wire.
func ChunksToProto(chunks []Chunk) []*codecv1.Chunk {
	out := make([]*codecv1.Chunk, len(chunks))
	for i, c := range chunks {
		out[i] = &codecv1.Chunk{Data: c.Data, Offsets: c.Offsets}
	}
	return out
}

// ChunksFromProto converts decoded chunks from the wire.
func ChunksFromProto(p []*codecv1.Chunk) []Chunk {
	out := make([]Chunk, len(p))
	for i, c := range p {
		out[i] = Chunk{Data: c.GetData(), Offsets: c.GetOffsets()}
		if len(out[i].Offsets) == 0 {
			out[i].Offsets = nil
		}
	}
	return out
}

// decode decodes a batch; release gives back the memory its response
// holds, once it is written, and the chunks are the response's, whose
// lent buffers (codec.Chunk.Release) may be handed back then too.
func (s *Server) decode(ctx context.Context, req *codecv1.DecodeRequest) (_ *codecv1.DecodeResponse, release func(), _ []Chunk, err error) {
	spec, err := SpecFromProto(req.GetSpec())
	if err != nil {
		return nil, noRelease, nil, err
	}
	var chunks []Chunk
	release = noRelease
	var start time.Time
	if s.obs != nil {
		start = time.Now()
	}
	encoded, n := req.GetEncoded(), len(req.GetEncoded())
	if len(req.GetRefs()) > 0 && n > 0 {
		return nil, noRelease, nil, errs.New(errs.InvalidArgument, "decode: both encoded chunks and refs")
	}
	if len(req.GetRefs()) > 0 {
		n = len(req.GetRefs())
	}
	sel, err := SelectionsFromProto(req.GetSelections(), n, spec)
	if err != nil {
		return nil, noRelease, nil, err
	}
	var found []bool     // worker-fetch: which refs were found
	var fetchFailed bool // worker-fetch: the fetch failed (not a decoded batch)
	if s.budget != nil && s.local != nil {
		g := &grant{b: s.budget}
		// Each new start covers a later point of the batch than the last
		// (what was learnt is held from the start): at most one per
		// fetch round and chunk, unless the store's values change.
		for restarts := 0; ; restarts++ {
			encoded, found, chunks, fetchFailed, err = s.decodeGranted(ctx, spec, req, sel, g)
			if !errors.Is(err, errRegrant) {
				break
			}
			if restarts > 2*n+2 {
				g.release()
				err = errs.New(errs.ResourceExhausted, "decoding a batch of %d chunks of %v %s: the server's memory budget (--memory-limit) stayed in use by other calls; try again later", n, spec.Shape, spec.DataType)
				break
			}
			if err = g.regrant(ctx, fmt.Sprintf("decoding a batch of %d chunks of %v %s", n, spec.Shape, spec.DataType)); err != nil {
				break
			}
		}
		release = g.release
		if err != nil {
			g.release()
			if fetchFailed {
				return nil, noRelease, nil, err
			}
			release = noRelease
		}
	} else {
		if len(req.GetRefs()) > 0 {
			if encoded, found, _, err = s.fetchEncoded(ctx, spec, req.GetRefs(), nil); err != nil {
				return nil, noRelease, nil, err
			}
			sel = foundSelections(sel, found)
		}
		chunks, err = s.e.Decode(ctx, spec, encoded)
		for i := range chunks {
			if err == nil && sel != nil {
				if chunks[i], err = selectChunk(chunks[i], spec, sel[i]); err != nil {
					err = &codec.ItemError{Index: i, Err: err}
				}
			}
		}
	}
	if s.obs != nil {
		s.obs.Batch(false, spec, len(encoded), start, err)
	}
	if err != nil {
		if found != nil {
			err = reindex(err, found)
		}
		return nil, noRelease, nil, err
	}
	out := ChunksToProto(chunks)
	if found != nil {
		all := make([]*codecv1.Chunk, len(found))
		k := 0
		for i, f := range found {
			if f {
				all[i] = out[k]
				k++
			} else {
				all[i] = &codecv1.Chunk{Missing: true}
			}
		}
		out = all
	}
	return &codecv1.DecodeResponse{Chunks: out}, release, chunks, nil
}

// decodeGranted fetches (worker-fetch) and decodes a batch with its
// memory reserved in g; errRegrant if g could not grow without waiting
// (everything fetched and decoded dropped: see grant). fetchFailed says
// an error came from the fetch.
func (s *Server) decodeGranted(ctx context.Context, spec *codec.BatchSpec, req *codecv1.DecodeRequest, sel []codec.Selection, g *grant) (encoded [][]byte, found []bool, _ []Chunk, fetchFailed bool, err error) {
	encoded = req.GetEncoded()
	var base int64
	if len(req.GetRefs()) > 0 {
		if encoded, found, base, err = s.fetchEncoded(ctx, spec, req.GetRefs(), g); err != nil {
			return nil, nil, nil, !errors.Is(err, errRegrant), err
		}
		sel = foundSelections(sel, found)
	}
	chunks, err := s.decodeBudgeted(ctx, spec, encoded, sel, g, base)
	return encoded, found, chunks, false, err
}

// foundSelections is the selections of the refs found (a new slice: a
// batch started again selects from the request's again).
func foundSelections(sel []codec.Selection, found []bool) []codec.Selection {
	if sel == nil {
		return nil
	}
	out := make([]codec.Selection, 0, len(sel))
	for i, f := range found {
		if f {
			out = append(out, sel[i])
		}
	}
	return out
}

// reindex moves an item error's index from the found chunks of a fetched
// batch to the batch's refs.
func reindex(err error, found []bool) error {
	var ie *codec.ItemError
	if !errors.As(err, &ie) {
		return err
	}
	k := 0
	for i, f := range found {
		if f {
			if k == ie.Index {
				return &codec.ItemError{Index: i, Err: ie.Err}
			}
			k++
		}
	}
	return err
}

func noRelease() {}

// decodeBudgeted decodes a batch with its memory reserved in g (see
// NewBudgetServer, grant), beside the base bytes g holds already (the
// chunks a worker fetched). Fixed-size results are reserved at once, at
// their exact size. Variable-length results have no size until decoded:
// the batch reserves the offsets of all its chunks and one chunk's
// allowance of element bytes, and, as each chunk's element bytes turn
// out, adds them before the next chunk gets its allowance: only if they
// are free now, else errRegrant, g.need being all the batch now knows it
// needs and as much again for the chunks not yet decoded, at their
// average so far, if the budget can ever hold that (the batch then waits
// for it holding nothing, and starts again: the sizes it learnt are
// covered, so this happens at most once per chunk).
func (s *Server) decodeBudgeted(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte, sel []codec.Selection, g *grant, base int64) ([]Chunk, error) {
	c, err := s.local.Chain(spec)
	if err != nil {
		return nil, err
	}
	if len(encoded) == 0 {
		// Nothing to decode (a worker-fetch batch whose chunks are all
		// missing, or an empty request): nothing to reserve either.
		return nil, nil
	}
	n := int64(len(encoded))
	var in int64
	for _, e := range encoded {
		in += int64(len(e))
	}
	variable := c.Spec().DataType.VariableLength()
	perChunk := c.DecodedBound() // fixed: exact; variable: offsets + allowance
	allowance := int64(0)
	if variable {
		allowance = c.Limits().MaxVariableBytes
		perChunk -= allowance
	}
	working := c.WorkingBound()
	first, ok := sumProducts(in, n, perChunk, allowance, working)
	if !ok || first > math.MaxInt64-base {
		return nil, errs.New(errs.ResourceExhausted, "a batch of %d chunks of %v %s needs more memory than can be counted", n, spec.Shape, spec.DataType)
	}
	first += base
	what := fmt.Sprintf("decoding a batch of %d chunks of %v %s", n, spec.Shape, spec.DataType)
	if err := g.grow(ctx, first, what); err != nil {
		return nil, err
	}
	out := make([]Chunk, len(encoded))
	drop := func(upto int) {
		for _, ch := range out[:upto] {
			ch.Release()
		}
	}
	var data int64 // element bytes of the chunks decoded so far but the last
	for i, e := range encoded {
		if err := ctx.Err(); err != nil {
			drop(i)
			return nil, err
		}
		if out[i], err = c.Decode(e); err == nil && sel != nil {
			// Selected at once: the whole chunk is garbage before the next.
			out[i], err = selectChunk(out[i], spec, sel[i])
		}
		if err != nil {
			drop(i)
			return nil, &codec.ItemError{Index: i, Err: err}
		}
		if !variable || i == len(encoded)-1 {
			continue
		}
		// Chunk i keeps its element bytes: they are reserved too, so that
		// the next chunk again has a whole allowance.
		data += int64(len(out[i].Data))
		need := first + data // no overflow: data <= i*allowance, counted in first
		if err := g.grow(ctx, need, what); err != nil {
			drop(i + 1)
			if errors.Is(err, errRegrant) {
				// The strings of the chunks still to decode, at the average
				// so far (no overflow: data/(i+1) <= allowance, counted in
				// first), if the budget can ever hold them.
				left := n - int64(i) - 2
				g.need = max(g.need, min(need+left*(data/int64(i+1)), s.budget.Limit()))
			}
			return nil, err
		}
	}
	// The working buffers are garbage now, and what is left of the
	// allowance unused: keep what the results hold.
	keep := base + in + n*perChunk
	if variable {
		keep += data + int64(len(out[len(out)-1].Data))
	}
	g.shrink(keep)
	return out, nil
}

// sumProducts is in + n*per + extra + working, or false if it overflows.
func sumProducts(in, n, per, extra, working int64) (int64, bool) {
	if per > 0 && n > math.MaxInt64/per {
		return 0, false
	}
	t := n * per
	for _, x := range []int64{in, extra, working} {
		if t > math.MaxInt64-x {
			return 0, false
		}
		t += x
	}
	return t, true
}

func (s *Server) encode(ctx context.Context, req *codecv1.EncodeRequest) (_ *codecv1.EncodeResponse, release func(), err error) {
	spec, err := SpecFromProto(req.GetSpec())
	if err != nil {
		return nil, noRelease, err
	}
	chunks := ChunksFromProto(req.GetChunks())
	release = noRelease
	var start time.Time
	if s.obs != nil {
		start = time.Now()
		defer func() { s.obs.Batch(true, spec, len(chunks), start, err) }()
	}
	if s.budget != nil && s.local != nil {
		if release, err = s.reserveEncode(ctx, spec, chunks); err != nil {
			return nil, noRelease, err
		}
	}
	encoded, err := s.e.Encode(ctx, spec, chunks)
	if err != nil {
		release()
		return nil, noRelease, err
	}
	return &codecv1.EncodeResponse{Encoded: encoded}, release, nil
}

// reserveEncode reserves an encode batch's memory: its chunks, their
// encodings at their bound and one chunk's working buffers. Unlike
// decoding, everything is known up front, even for variable-length data.
func (s *Server) reserveEncode(ctx context.Context, spec *codec.BatchSpec, chunks []Chunk) (func(), error) {
	c, err := s.local.Chain(spec)
	if err != nil {
		return nil, err
	}
	var in, out, most, mostData int64
	for _, ch := range chunks {
		size := int64(len(ch.Data)) + 8*int64(len(ch.Offsets))
		in += size
		most = max(most, size)
		mostData = max(mostData, int64(len(ch.Data)))
		_, _, enc := c.boundsFor(int64(len(ch.Data)))
		out += enc
	}
	// A chunk over the limits is refused by Encode without being worked
	// on: reserve for it as if it were at the limit.
	mostData = min(mostData, c.Limits().MaxVariableBytes)
	r, err := s.budget.Acquire(ctx, in+out+most+c.workingBound(mostData), fmt.Sprintf("encoding a batch of %d chunks of %v %s", len(chunks), spec.Shape, spec.DataType))
	if err != nil {
		return nil, err
	}
	return r.Release, nil
}

// Decode implements codecv1.CodecServiceServer. The batch's memory is
// released when the response is handed to gRPC: a unary handler cannot
// see it written (Process can, and is what the gateway uses).
func (s *Server) Decode(ctx context.Context, req *codecv1.DecodeRequest) (*codecv1.DecodeResponse, error) {
	if len(req.GetSharedEncoded()) > 0 || len(req.GetOutputs()) > 0 {
		return nil, grpcerr.ToStatus(errs.New(errs.InvalidArgument, "decode: shared-memory regions outside a Process stream"))
	}
	// The chunks' lent buffers are left to the garbage collector: gRPC
	// marshals the response after this returns.
	resp, release, _, err := s.decode(ctx, req)
	release()
	return resp, grpcerr.ToStatus(err)
}

// Encode implements codecv1.CodecServiceServer.
func (s *Server) Encode(ctx context.Context, req *codecv1.EncodeRequest) (*codecv1.EncodeResponse, error) {
	resp, release, err := s.encode(ctx, req)
	release()
	return resp, grpcerr.ToStatus(err)
}

// Drain tells every Process stream, those open and those opened later,
// that the worker is shutting down (a Draining response with id 0): callers
// then send no more batches on them and close their side once their
// batches are answered, which ends the streams, so that a graceful stop of
// the server finishes instead of waiting for streams that would otherwise
// live as long as their callers. Batches that arrive meanwhile are still
// answered. The notice travels on the stream itself, behind nothing the
// caller could have sent after it: no batch is lost between the worker
// deciding to stop and the caller learning it. Drain returns how many
// streams were open.
func (s *Server) Drain() int {
	s.drainOnce.Do(func() { close(s.drain) })
	return int(s.streams.Load())
}

// Process implements codecv1.CodecServiceServer: batches are worked on
// concurrently, up to a bound, and answered as they finish. A failed batch
// is answered with its error; the stream goes on. Each batch runs under its
// caller's deadline (deadline_unix_nanos) and stops when the caller cancels
// it, so a caller's deadline or cancellation reaches the worker although
// the stream outlives the call. The stream ends when the caller closes its
// side, once every batch is answered (see Drain).
func (s *Server) Process(stream grpc.BidiStreamingServer[codecv1.ProcessRequest, codecv1.ProcessResponse]) error {
	ctx := stream.Context()
	s.streams.Add(1)
	defer s.streams.Add(-1)
	var sendMu, runMu sync.Mutex
	running := make(map[uint64]context.CancelFunc)
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.inflight)
	var sendErr error
	var releases releaseSet
	pooled := wire.HasCodec(ctx)
	// The caller's shared-memory segment, once attached (sharedmem.go):
	// set by the loop before any batch that may use it starts, unmapped
	// after every batch has ended (no answer refers to it).
	var seg *shm.Mapping
	defer func() {
		if seg != nil {
			seg.Close()
		}
	}()
	defer releases.releaseAll()
	defer wg.Wait()
	// The drain notice is sent from its own goroutine, which ends before
	// the handler returns (no send after that).
	stop, noticed := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-noticed }()
	go func() {
		defer close(noticed)
		select {
		case <-s.drain:
		case <-stop:
			return
		case <-ctx.Done():
			return
		}
		sendMu.Lock()
		defer sendMu.Unlock()
		// A failed send means a broken stream, which Recv reports.
		stream.Send(&codecv1.ProcessResponse{Result: &codecv1.ProcessResponse_Draining{Draining: &codecv1.Draining{}}})
	}()
	for {
		// A batch's bytes are received into a pooled buffer, handed back
		// once its response is written (results may alias them), on a
		// server with wire's codec; other codecs know only messages.
		req := new(codecv1.ProcessRequest)
		in := &wire.Pooled{Msg: req}
		var err error
		if pooled {
			err = stream.RecvMsg(in)
		} else {
			err = stream.RecvMsg(req)
		}
		if err != nil {
			wg.Wait()
			if errors.Is(err, context.Canceled) || isEOF(err) {
				return sendErr
			}
			return err
		}
		if _, ok := req.GetWork().(*codecv1.ProcessRequest_Cancel); ok {
			runMu.Lock()
			if cancel := running[req.GetId()]; cancel != nil {
				cancel()
			}
			runMu.Unlock()
			continue
		}
		if a, ok := req.GetWork().(*codecv1.ProcessRequest_Attach); ok {
			ans := &codecv1.SharedMemoryAnswer{Reason: "a segment is attached to this stream already"}
			if seg == nil {
				seg, ans = s.attachShared(a.Attach)
			}
			sendMu.Lock()
			err := stream.Send(&codecv1.ProcessResponse{Id: req.GetId(), Result: &codecv1.ProcessResponse_Attached{Attached: ans}})
			sendMu.Unlock()
			if err != nil {
				wg.Wait()
				return err
			}
			continue
		}
		bctx, cancel := context.WithCancel(ctx)
		if d := req.GetDeadlineUnixNanos(); d != 0 {
			bctx, cancel = context.WithDeadline(ctx, time.Unix(0, d))
		}
		runMu.Lock()
		running[req.GetId()] = cancel
		runMu.Unlock()
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			cancel()
			return ctx.Err()
		}
		wg.Add(1)
		seg := seg // as it is now: the loop may attach one later
		go func() {
			defer func() {
				runMu.Lock()
				delete(running, req.GetId())
				runMu.Unlock()
				cancel()
				<-sem
				wg.Done()
			}()
			resp := &codecv1.ProcessResponse{Id: req.GetId()}
			var err error
			var chunks []Chunk // decoded, whose lent buffers are recycled with the request's
			var copied []byte  // the encoded chunks copied out of the segment (pooled)
			release := noRelease
			bctx, span := batchSpan(bctx, req)
			defer func() { endSpan(span, err) }()
			switch w := req.GetWork().(type) {
			case *codecv1.ProcessRequest_Decode:
				var r *codecv1.DecodeResponse
				if copied, err = sharedInputs(seg, w.Decode); err != nil {
					break
				}
				if r, ok, e := s.decodeInto(bctx, seg, w.Decode); ok {
					if err = e; err == nil {
						resp.Result = &codecv1.ProcessResponse_Decode{Decode: r}
					}
					break
				}
				if r, release, chunks, err = s.decode(bctx, w.Decode); err == nil {
					if seg != nil {
						sharedOutputs(seg, w.Decode, r)
					}
					resp.Result = &codecv1.ProcessResponse_Decode{Decode: r}
				}
			case *codecv1.ProcessRequest_Encode:
				var r *codecv1.EncodeResponse
				if r, release, err = s.encode(bctx, w.Encode); err == nil {
					resp.Result = &codecv1.ProcessResponse_Encode{Encode: r}
				}
			default:
				err = errs.New(errs.InvalidArgument, "process: batch %d has no work", req.GetId())
			}
			if err != nil {
				resp.Result = &codecv1.ProcessResponse_Error{Error: BatchErrorToProto(err)}
			}
			sendMu.Lock()
			defer sendMu.Unlock()
			// Results are fresh buffers or the request's own (received)
			// bytes, never modified: sent without a copy (on a server with
			// wire's codec; wire.Send copies on others). Their memory is
			// released once gRPC has written them (done), or at once if
			// the send fails; done is not called for a message never
			// written, so the stream's end releases what is left. release
			// runs at most once, whoever calls it. The buffers themselves
			// (the request's pooled buffer, the decoders' lent ones) go
			// back to the pool only from done, when gRPC is known to be
			// finished with them; otherwise to the garbage collector.
			done, failed := releases.add(release, recycler(chunks, in.Buf, copied))
			if e := wire.Send(stream, resp, done); e != nil {
				failed()
				if sendErr == nil {
					sendErr = e
				}
			}
		}()
	}
}

// recycler hands back to the pool a received request's pooled buffer
// (nil: none) and the buffers the engine lent with the chunks decoded from
// it (codec.Chunk.Release), for the next batches to reuse instead of
// allocating and zeroing their size again; nil if there is nothing to hand
// back.
func recycler(chunks []Chunk, bufs ...[]byte) func() {
	lent := false
	for _, c := range chunks {
		lent = lent || c.Lent()
	}
	for _, b := range bufs {
		lent = lent || b != nil
	}
	if !lent {
		return nil
	}
	return func() {
		for _, c := range chunks {
			c.Release()
		}
		for _, b := range bufs {
			if b != nil {
				bufpool.Put(b)
			}
		}
	}
}

// releaseSet holds the releases of a stream's responses not yet known to
// be written, for the stream's end to call.
type releaseSet struct {
	mu   sync.Mutex
	next uint64
	fs   map[uint64]func()
}

// add registers f and returns two functions that call it once and forget
// it: done, for when gRPC has written the response, also calls recycle
// (if set); failed does not. releaseAll calls f alone too: the stream's
// end does not mean gRPC's writer is done with the buffers.
func (r *releaseSet) add(f, recycle func()) (done, failed func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fs == nil {
		r.fs = make(map[uint64]func())
	}
	id := r.next
	r.next++
	r.fs[id] = f
	failed = func() {
		r.mu.Lock()
		g := r.fs[id]
		delete(r.fs, id)
		r.mu.Unlock()
		if g != nil {
			g()
		}
	}
	done = failed
	if recycle != nil {
		done = func() {
			failed()
			recycle()
		}
	}
	return done, failed
}

func (r *releaseSet) releaseAll() {
	r.mu.Lock()
	fs := r.fs
	r.fs = nil
	r.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }

// BatchErrorToProto turns a batch failure into its wire form, keeping the
// code and the index of the failing item.
func BatchErrorToProto(err error) *codecv1.BatchError {
	be := &codecv1.BatchError{Code: int32(grpcerr.Code(err)), Message: err.Error()}
	var ie *codec.ItemError
	if errors.As(err, &ie) {
		i := int32(ie.Index)
		be.ItemIndex = &i
	}
	return be
}

// batchSpan continues the trace of a batch's caller (the trace context and
// request id the batch carries: the stream's own context belongs to no
// call) with a span for the batch's work, when this process traces.
func batchSpan(ctx context.Context, req *codecv1.ProcessRequest) (context.Context, trace.Span) {
	if id := req.GetRequestId(); tracing.ValidRequestID(id) {
		ctx = tracing.WithRequestID(ctx, id)
	}
	if !tracing.Enabled() {
		return ctx, nil
	}
	ctx = tracing.Extract(ctx, req.GetTraceContext())
	name, n := "codec.Decode", 0
	switch w := req.GetWork().(type) {
	case *codecv1.ProcessRequest_Decode:
		n = len(w.Decode.GetEncoded()) + len(w.Decode.GetRefs()) + len(w.Decode.GetSharedEncoded())
	case *codecv1.ProcessRequest_Encode:
		name, n = "codec.Encode", len(w.Encode.GetChunks())
	}
	return otel.Tracer("github.com/zarrgate/zarrgate/codecsvc").Start(ctx, name,
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attribute.Int("zarrgate.chunks", n)))
}

func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
}
