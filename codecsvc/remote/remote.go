// Package remote is a codec engine that runs on codec workers over gRPC: it
// implements codec.Engine like the in-process engine. Batches travel on
// long-lived bidirectional Process streams, many at a time, so that a
// caller pipelines chunks instead of waiting for each. Each batch carries
// its caller's deadline, and a caller that gives up cancels its batch on
// the worker. The engine's layouts (codec.Layouts: chunk checks and the
// shard index chain) are answered in this process by codecsvc.Layouts: they
// are no chunk work, and the shard index is decoded on every partial read
// of a shard, where a round trip to a worker would cost more than the work.
package remote

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/tracing"
	"github.com/zarrgate/zarrgate/internal/wire"
)

// maxBatchBytes bounds the decoded bytes one request or response carries;
// larger batches are split and sent concurrently.
const maxBatchBytes = 16 << 20

// streams is how many Process streams a client keeps open. The balancer
// spreads them over the workers (round_robin), and each batch goes to the
// stream with the fewest batches in flight, so a slow worker, whose batches
// back up, gets less work.
const streams = 4

// Client is a remote codec engine.
type Client struct {
	codecsvc.Layouts // in process: see the package documentation

	c      codecv1.CodecServiceClient
	nextID atomic.Uint64

	mu     sync.Mutex
	stream [streams]*procStream
	// retired are streams of draining workers taken out of stream: they
	// still answer their batches, and Close ends them too.
	retired []*procStream
	drains  atomic.Uint64
}

var _ codec.Engine = (*Client)(nil)

// New returns a codec engine running on the worker(s) behind cc.
func New(cc grpc.ClientConnInterface) *Client { return &Client{c: codecv1.NewCodecServiceClient(cc)} }

// Close ends the streams.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.stream {
		if s != nil {
			s.cancel()
			c.stream[i] = nil
		}
	}
	for _, s := range c.retired {
		s.cancel()
	}
	c.retired = nil
	return nil
}

// DrainNotices is how many streams were retired because their worker said
// it was draining.
func (c *Client) DrainNotices() uint64 { return c.drains.Load() }

// procStream is one open Process stream and the batches waiting on it.
type procStream struct {
	s      grpc.BidiStreamingClient[codecv1.ProcessRequest, codecv1.ProcessResponse]
	addr   string // the worker's address, as the connection sees it
	cancel context.CancelFunc
	sendMu sync.Mutex

	mu      sync.Mutex
	waiting map[uint64]chan *codecv1.ProcessResponse
	err     error
	done    chan struct{}
	// draining is set when the worker said it is shutting down: no batch
	// is sent on the stream any more, and once every batch sent is
	// answered the stream's side is closed (closed), which lets the
	// worker end it.
	draining, closed bool
	onDrain          func()
}

func (ps *procStream) alive() bool {
	select {
	case <-ps.done:
		return false
	default:
		return true
	}
}

func (ps *procStream) inflight() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.waiting)
}

// InFlight adds up the batches in flight on each worker (by address) to
// f: what the gateway's metrics report per codec worker. Workers with no
// open stream are not named.
func (c *Client) InFlight(f func(worker string, batches int)) {
	c.mu.Lock()
	// Streams retired by a draining worker still finish their batches.
	streams := append(c.stream[:len(c.stream):len(c.stream)], c.retired...)
	c.mu.Unlock()
	per := make(map[string]int, len(streams))
	for _, s := range streams {
		if s != nil && s.alive() {
			per[s.addr] += s.inflight()
		}
	}
	for w, n := range per {
		f(w, n)
	}
}

// usable reports a stream that takes new batches: open, and its worker
// not draining.
func (ps *procStream) usable() bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.err == nil && !ps.draining
}

// open returns the open stream with the fewest batches in flight, first
// opening any missing, broken or draining one (a new stream goes where the
// balancer sends it: not to a worker whose health service says it is not
// serving).
func (c *Client) open() (*procStream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	slot, least := -1, 0
	for i, s := range c.stream {
		if s == nil || !s.usable() {
			slot = i
			break
		}
		if n := s.inflight(); slot == -1 || n < least {
			slot, least = i, n
		}
	}
	old := c.stream[slot]
	if old != nil && old.usable() {
		return old, nil
	}
	if old != nil && old.alive() {
		c.retired = append(c.retired, old) // draining: it ends by itself
	}
	c.retired = slices.DeleteFunc(c.retired, func(s *procStream) bool { return !s.alive() })
	ctx, cancel := context.WithCancel(context.Background())
	s, err := c.c.Process(ctx)
	if err != nil {
		cancel()
		c.stream[slot] = nil
		return nil, grpcerr.FromStatus(err)
	}
	addr := "unknown"
	if p, ok := peer.FromContext(s.Context()); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	ps := &procStream{s: s, addr: addr, cancel: cancel, waiting: make(map[uint64]chan *codecv1.ProcessResponse), done: make(chan struct{}),
		onDrain: func() { c.drains.Add(1) }}
	go ps.receive()
	c.stream[slot] = ps
	return ps, nil
}

func (ps *procStream) receive() {
	for {
		resp, err := ps.s.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				// After a drain, the expected end: nothing waits on it.
				err = status.Error(codes.Unavailable, "codec worker closed the stream")
			}
			ps.fail(grpcerr.FromStatus(err))
			return
		}
		if resp.GetDraining() != nil {
			ps.mu.Lock()
			first := !ps.draining
			ps.draining = true
			ps.mu.Unlock()
			if first && ps.onDrain != nil {
				ps.onDrain()
			}
			ps.closeIfDrained()
			continue
		}
		ps.mu.Lock()
		ch := ps.waiting[resp.GetId()]
		delete(ps.waiting, resp.GetId())
		ps.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
		ps.closeIfDrained()
	}
}

// closeIfDrained closes the stream's side once its worker is draining and
// every batch sent on it is answered (or given up on), so that the worker
// ends the stream. A batch is registered in waiting before it is sent, so
// none is sent after this.
func (ps *procStream) closeIfDrained() {
	ps.mu.Lock()
	if !ps.draining || ps.closed || len(ps.waiting) > 0 {
		ps.mu.Unlock()
		return
	}
	ps.closed = true
	ps.mu.Unlock()
	ps.sendMu.Lock()
	ps.s.CloseSend()
	ps.sendMu.Unlock()
}

func (ps *procStream) fail(err error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.err == nil {
		ps.err = err
		close(ps.done)
		ps.cancel()
	}
}

// do sends one batch and waits for its answer.
func (c *Client) do(ctx context.Context, req *codecv1.ProcessRequest) (*codecv1.ProcessResponse, error) {
	req.Id = c.nextID.Add(1)
	if d, ok := ctx.Deadline(); ok {
		req.DeadlineUnixNanos = d.UnixNano()
	}
	// The stream outlives the call: the call's trace and request id travel
	// with the batch, for the worker's span and log lines.
	req.TraceContext = tracing.Inject(ctx)
	req.RequestId = tracing.RequestID(ctx)
	ch := make(chan *codecv1.ProcessResponse, 1)
	var ps *procStream
	for {
		var err error
		if ps, err = c.open(); err != nil {
			return nil, err
		}
		ps.mu.Lock()
		if ps.err != nil {
			ps.mu.Unlock()
			return nil, ps.err
		}
		if !ps.draining {
			break
		}
		// Its worker began draining since open chose it: another stream
		// (open replaces this one).
		ps.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	ps.waiting[req.Id] = ch
	ps.mu.Unlock()
	ps.sendMu.Lock()
	// Batch data is sent without a copy: callers hand over chunks they do
	// not modify while the batch is out (the answer arrives only after
	// every byte was read).
	err := ps.s.SendMsg(wire.ByRef{Msg: req})
	ps.sendMu.Unlock()
	if err != nil {
		ps.fail(errs.New(errs.Unavailable, "codec stream: %v", err))
		return nil, ps.err
	}
	select {
	case resp := <-ch:
		if be := resp.GetError(); be != nil {
			return nil, batchError(be)
		}
		return resp, nil
	case <-ps.done:
		return nil, ps.err
	case <-ctx.Done():
		// Tell the worker to abandon the batch (best effort), unless the
		// stream's side is closed already.
		ps.sendMu.Lock()
		ps.mu.Lock()
		delete(ps.waiting, req.Id)
		closed := ps.closed
		ps.mu.Unlock()
		if !closed {
			ps.s.Send(&codecv1.ProcessRequest{Id: req.Id, Work: &codecv1.ProcessRequest_Cancel{Cancel: &codecv1.CancelRequest{}}})
		}
		ps.sendMu.Unlock()
		ps.closeIfDrained()
		return nil, ctx.Err()
	}
}

// batchError rebuilds a worker's batch error with its code and, when one
// chunk failed, its index.
func batchError(be *codecv1.BatchError) error {
	err := grpcerr.FromStatus(status.Error(codes.Code(be.GetCode()), be.GetMessage()))
	if be.ItemIndex != nil {
		return &codec.ItemError{Index: int(be.GetItemIndex()), Err: err}
	}
	return err
}

// split cuts n items into runs whose decoded size stays under
// maxBatchBytes (at least one item per run).
func split(spec *codec.BatchSpec, n int) [][2]int {
	per := int64(spec.DataType.Size)
	for _, d := range spec.Shape {
		per *= d
	}
	if per <= 0 {
		per = 1 << 20 // variable length: assume 1 MiB per chunk
	}
	step := max(1, int(maxBatchBytes/per))
	var runs [][2]int
	for i := 0; i < n; i += step {
		runs = append(runs, [2]int{i, min(n, i+step)})
	}
	return runs
}

// Remote says the engine's work runs on codec workers, not in this
// process (the gateway's scheduler shares out only its own processors).
func (c *Client) Remote() bool { return true }

// Decode implements codec.Engine.
func (c *Client) Decode(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte) ([]codec.Chunk, error) {
	ps, err := codecsvc.SpecToProto(spec)
	if err != nil {
		return nil, err
	}
	out := make([]codec.Chunk, len(encoded))
	g, gctx := errgroup.WithContext(ctx)
	for _, r := range split(spec, len(encoded)) {
		g.Go(func() error {
			resp, err := c.do(gctx, &codecv1.ProcessRequest{Work: &codecv1.ProcessRequest_Decode{Decode: &codecv1.DecodeRequest{Spec: ps, Encoded: encoded[r[0]:r[1]]}}})
			if err != nil {
				return shift(err, r[0])
			}
			chunks := resp.GetDecode().GetChunks()
			if len(chunks) != r[1]-r[0] {
				return errs.New(errs.DataLoss, "codec worker answered %d chunks for %d", len(chunks), r[1]-r[0])
			}
			copy(out[r[0]:], codecsvc.ChunksFromProto(chunks))
			return nil
		})
	}
	return out, g.Wait()
}

// Encode implements codec.Engine.
func (c *Client) Encode(ctx context.Context, spec *codec.BatchSpec, chunks []codec.Chunk) ([][]byte, error) {
	ps, err := codecsvc.SpecToProto(spec)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(chunks))
	g, gctx := errgroup.WithContext(ctx)
	for _, r := range split(spec, len(chunks)) {
		g.Go(func() error {
			resp, err := c.do(gctx, &codecv1.ProcessRequest{Work: &codecv1.ProcessRequest_Encode{Encode: &codecv1.EncodeRequest{Spec: ps, Chunks: codecsvc.ChunksToProto(chunks[r[0]:r[1]])}}})
			if err != nil {
				return shift(err, r[0])
			}
			enc := resp.GetEncode().GetEncoded()
			if len(enc) != r[1]-r[0] {
				return errs.New(errs.DataLoss, "codec worker answered %d chunks for %d", len(enc), r[1]-r[0])
			}
			copy(out[r[0]:], enc)
			return nil
		})
	}
	return out, g.Wait()
}

// shift moves an item error's index from a sub-batch to the whole batch.
func shift(err error, by int) error {
	var ie *codec.ItemError
	if errors.As(err, &ie) {
		return &codec.ItemError{Index: ie.Index + by, Err: ie.Err}
	}
	return err
}
