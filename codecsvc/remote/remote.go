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
	"fmt"
	"io"
	"log/slog"
	"net"
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
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/tracing"
	"github.com/zarrgate/zarrgate/internal/wire"
)

// maxBatchBytes bounds the decoded bytes one request or response carries;
// larger batches are split and sent concurrently.
const maxBatchBytes = 16 << 20

// How many Process streams a client keeps. With a Workers (NewPool), each
// ready worker has at least one stream and, while each of its streams has
// growAt batches in flight or more, up to maxWorkerStreams; each batch goes
// to the worker with the fewest batches in flight (ties in turn), on its
// stream with the fewest, so a slow worker, whose batches back up, gets
// less work. Without one (New), the client keeps fixedStreams streams and
// gRPC's balancer places them.
const (
	maxWorkerStreams = 4
	growAt           = 2
	fixedStreams     = 4
)

// Workers is the set of ready workers behind a connection, and a way to
// place a stream on one of them (rpc.Pool, made by rpc.DialPool).
type Workers interface {
	// Ready returns the addresses of the ready workers, sorted, and a
	// version that changes whenever they do.
	Ready() ([]string, uint64)
	// On returns ctx for a call to be placed on the worker at addr, and a
	// function that tells, once the call started, on which worker it was
	// placed.
	On(ctx context.Context, addr string) (context.Context, func() string)
}

// Client is a remote codec engine.
type Client struct {
	codecsvc.Layouts // in process: see the package documentation

	c      codecv1.CodecServiceClient
	w      Workers // nil: fixedStreams placed by gRPC
	nextID atomic.Uint64

	mu sync.Mutex
	// workers holds the streams of each ready worker, by address (with no
	// Workers: fixedStreams slots named "#0"…); order is their order, and
	// turn where the next search for the least loaded starts.
	workers map[string]*worker
	order   []string
	version uint64 // of the ready set workers follows
	turn    int
	// retired are streams of draining or removed workers taken out of
	// workers: they still answer their batches, and Close ends them too.
	retired []*procStream
	drains  atomic.Uint64

	// Shared memory with workers on this host (shared.go).
	sharedBytes                  int64
	sharedBudget                 *membudget.Budget
	sharedAttached, sharedChunks atomic.Uint64
	stagedSent                   atomic.Uint64
}

// worker is the open streams of one worker.
type worker struct{ streams []*procStream }

var _ codec.Engine = (*Client)(nil)

// New returns a codec engine running on the worker(s) behind cc, with
// fixedStreams streams placed by cc's balancer.
func New(cc grpc.ClientConnInterface) *Client { return &Client{c: codecv1.NewCodecServiceClient(cc)} }

// NewPool returns a codec engine running on the workers behind cc whose
// streams follow w: every ready worker gets work, including one that
// becomes ready while batches are in flight, and a worker that is no
// longer ready (removed, draining, failed) gets no new batch.
func NewPool(cc grpc.ClientConnInterface, w Workers) *Client {
	return &Client{c: codecv1.NewCodecServiceClient(cc), w: w}
}

// Close ends the streams.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.workers {
		for _, s := range w.streams {
			s.cancel()
		}
	}
	c.workers, c.order = nil, nil
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
	worker string // its key in Client.workers
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

	// shared is the stream's segment once its worker attached it (nil:
	// batches carry bytes); offer the one offered, until answered (its id
	// offerID). regions are the segments' allocations of the batches sent
	// and not answered, by id.
	shared  atomic.Pointer[sharedSeg]
	offer   *sharedSeg
	offerID uint64
	regions map[uint64]*regions
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
	streams := slices.Clone(c.retired)
	for _, w := range c.workers {
		streams = append(streams, w.streams...)
	}
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

// retire sends no more batches on the stream, and closes its side once
// those sent are answered (its worker is no longer ready).
func (ps *procStream) retire() {
	ps.mu.Lock()
	ps.draining = true
	ps.mu.Unlock()
	ps.closeIfDrained()
}

// open returns the stream for the next batch: on the worker with the
// fewest batches in flight, its stream with the fewest, first opening one
// if the worker has none, or if each of its streams has growAt batches in
// flight or more (up to maxWorkerStreams).
func (c *Client) open() (*procStream, error) {
	c.mu.Lock()
	ps, retire, err := c.openLocked()
	c.mu.Unlock()
	for _, s := range retire {
		s.retire()
	}
	return ps, err
}

// follow brings workers up to date with the ready set, returning the
// streams of the workers that left it, to be retired.
func (c *Client) follow() (retire []*procStream) {
	if c.w == nil {
		if c.workers == nil {
			c.workers = make(map[string]*worker, fixedStreams)
			for i := range fixedStreams {
				k := fmt.Sprintf("#%d", i)
				c.workers[k] = &worker{}
				c.order = append(c.order, k)
			}
		}
		return nil
	}
	ready, v := c.w.Ready()
	if c.workers != nil && v == c.version {
		return nil
	}
	c.version = v
	if len(ready) == 0 {
		// None ready now: one stream placed by the connection, which
		// waits for a ready worker (or fails, see rpc.Tier).
		ready = []string{""}
	}
	workers := make(map[string]*worker, len(ready))
	for _, k := range ready {
		if w := c.workers[k]; w != nil {
			workers[k] = w
		} else {
			workers[k] = &worker{}
		}
	}
	for k, w := range c.workers {
		if workers[k] == nil {
			for _, s := range w.streams {
				if s.alive() {
					c.retired = append(c.retired, s)
					retire = append(retire, s)
				}
			}
		}
	}
	c.workers, c.order = workers, slices.Clone(ready)
	return retire
}

func (c *Client) openLocked() (*procStream, []*procStream, error) {
	retire := c.follow()
	// Streams broken, or whose worker said it is draining, are left (a
	// draining one ends by itself).
	for _, w := range c.workers {
		w.streams = slices.DeleteFunc(w.streams, func(s *procStream) bool {
			if s.usable() {
				return false
			}
			if s.alive() {
				c.retired = append(c.retired, s)
			}
			return true
		})
	}
	c.retired = slices.DeleteFunc(c.retired, func(s *procStream) bool { return !s.alive() })
	var best *worker
	var key string
	least := 0
	for i := range c.order {
		k := c.order[(c.turn+i)%len(c.order)]
		w := c.workers[k]
		load := 0
		for _, s := range w.streams {
			load += s.inflight()
		}
		if best == nil || load < least {
			best, key, least = w, k, load
		}
	}
	c.turn++
	var ps *procStream
	for _, s := range best.streams {
		if ps == nil || s.inflight() < ps.inflight() {
			ps = s
		}
	}
	limit := maxWorkerStreams
	if c.w == nil {
		limit = 1
	}
	if ps != nil && (ps.inflight() < growAt || len(best.streams) >= limit) {
		return ps, retire, nil
	}
	ps, err := c.openStream(key)
	if err != nil {
		if len(best.streams) > 0 {
			// The worker has a stream: use it rather than fail the batch.
			return best.streams[0], retire, nil
		}
		return nil, retire, err
	}
	if w := c.workers[ps.worker]; w != nil {
		w.streams = append(w.streams, ps)
	} else {
		best.streams = append(best.streams, ps)
	}
	return ps, retire, nil
}

// openStream opens a Process stream on the worker at key (with no
// Workers, or no ready worker, where the connection places it).
func (c *Client) openStream(key string) (*procStream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	sctx, placed := ctx, func() string { return key }
	if c.w != nil && key != "" {
		sctx, placed = c.w.On(ctx, key)
	}
	s, err := c.c.Process(sctx)
	if err != nil {
		cancel()
		return nil, grpcerr.FromStatus(err)
	}
	addr := "unknown"
	var paddr net.Addr
	if p, ok := peer.FromContext(s.Context()); ok && p.Addr != nil {
		addr, paddr = p.Addr.String(), p.Addr
	}
	ps := &procStream{s: s, addr: addr, worker: placed(), cancel: cancel, waiting: make(map[uint64]chan *codecv1.ProcessResponse), done: make(chan struct{}),
		onDrain: func() { c.drains.Add(1) }, regions: make(map[uint64]*regions)}
	if c.sharedBytes > 0 && sameHost(paddr) {
		// Offered before any batch; batches go as bytes until the worker
		// answers (receive).
		if seg := newSharedSeg(c.sharedBytes, c.sharedBudget); seg != nil {
			ps.offer, ps.offerID = seg, c.nextID.Add(1)
			err := s.Send(&codecv1.ProcessRequest{Id: ps.offerID, Work: &codecv1.ProcessRequest_Attach{Attach: &codecv1.SharedMemoryOffer{
				Path: seg.seg.Path, Size: uint64(len(seg.seg.Data)), Token: seg.seg.Token}}})
			if err != nil {
				seg.end()
				cancel()
				return nil, grpcerr.FromStatus(err)
			}
		}
	}
	attached := &c.sharedAttached
	go ps.receive(attached)
	return ps, nil
}

func (ps *procStream) receive(attached *atomic.Uint64) {
	for {
		resp, err := recvResponse(ps.s)
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
		if ps.offerID != 0 && resp.GetId() == ps.offerID {
			// The answer to the offer: an error (a worker that does not know
			// offers) is a refusal too. (offerID is set before receive
			// starts; offer is cleared by fail too, under ps.mu.)
			ps.mu.Lock()
			seg := ps.offer
			ps.offer = nil
			if seg == nil {
				ps.mu.Unlock()
				continue
			}
			ok := resp.GetAttached().GetAttached() && ps.err == nil
			size := len(seg.seg.Data) // fail, which may unmap it, holds ps.mu too
			if ok {
				ps.shared.Store(seg)
				attached.Add(1)
			} else {
				seg.end()
			}
			ps.mu.Unlock()
			// One line per stream, which lives as long as its worker.
			if ok {
				slog.Info("codec stream: the worker attached shared memory", "worker", ps.addr, "bytes", size)
			} else {
				reason := resp.GetAttached().GetReason()
				if be := resp.GetError(); be != nil {
					reason = be.GetMessage()
				}
				slog.Info("codec stream: the worker declined shared memory; chunks go on the stream", "worker", ps.addr, "reason", reason)
			}
			continue
		}
		ps.mu.Lock()
		ch := ps.waiting[resp.GetId()]
		delete(ps.waiting, resp.GetId())
		r := ps.regions[resp.GetId()]
		delete(ps.regions, resp.GetId())
		ps.mu.Unlock()
		if r != nil {
			// The worker is done with the batch's regions: what its caller
			// does not take is free.
			if ch == nil || resp.GetError() != nil {
				r.done()
			} else {
				r.freeIn()
			}
		}
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
		// Batches unanswered leave their regions to the worker for good:
		// the segment takes no more and goes once nothing lent is left.
		for id, r := range ps.regions {
			r.finish()
			delete(ps.regions, id)
		}
		if ps.offer != nil {
			ps.offer.end()
			ps.offer = nil
		}
		if seg := ps.shared.Load(); seg != nil {
			seg.end()
		}
	}
}

// testHookPlaced, if set (by tests only), sees the stream do chose and
// the regions the batch was given, before do checks the stream.
var testHookPlaced func(*procStream, *regions)

// do sends one batch and waits for its answer. A decode batch given
// outSizes, the size of each chunk's answer (0: unknown), on a stream with
// a shared-memory segment, gets regions of it (shared.go): the caller
// lends its answer's chunks from them and then calls done.
func (c *Client) do(ctx context.Context, req *codecv1.ProcessRequest, outSizes []int64) (*codecv1.ProcessResponse, *regions, error) {
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
	var r *regions
	for {
		var err error
		ps = nil
		if r == nil && outSizes != nil {
			// A batch of chunks staged in a stream's segment goes on that
			// stream while it takes batches (Stage chose it the way open
			// would have).
			if d := req.GetDecode(); d != nil {
				if s := c.stagedStream(d); s != nil && s.usable() {
					ps = s
				}
			}
		}
		if ps == nil {
			if ps, err = c.open(); err != nil {
				return nil, nil, err
			}
		}
		if seg := ps.shared.Load(); seg != nil && outSizes != nil && r == nil {
			if d := req.GetDecode(); d != nil {
				r = seg.place(d, outSizes)
			}
		}
		if testHookPlaced != nil {
			testHookPlaced(ps, r)
		}
		ps.mu.Lock()
		if ps.err != nil {
			ps.mu.Unlock()
			if r != nil {
				r.done() // never sent
			}
			return nil, nil, ps.err
		}
		if !ps.draining {
			break
		}
		// Its worker began draining since open chose it: another stream
		// (open replaces this one).
		ps.mu.Unlock()
		if r != nil {
			d := req.GetDecode()
			d.Encoded, d.SharedEncoded, d.Outputs = r.encoded, nil, nil
			r.done() // never sent
			r = nil
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
	}
	ps.waiting[req.Id] = ch
	if r != nil {
		ps.regions[req.Id] = r
		c.stagedSent.Add(uint64(len(r.staged)))
	}
	ps.mu.Unlock()
	ps.sendMu.Lock()
	// Batch data is sent without a copy: callers hand over chunks they do
	// not modify while the batch is out (the answer arrives only after
	// every byte was read).
	var msg any = wire.ByRef{Msg: req}
	if r != nil && r.inPlace() {
		// The chunks are in the segment: nothing large to send by
		// reference, and looking for it (by reflection) costs more than
		// marshalling the rest.
		msg = req
	}
	err := ps.s.SendMsg(msg)
	ps.sendMu.Unlock()
	if err != nil {
		ps.fail(errs.New(errs.Unavailable, "codec stream: %v", err))
		if r != nil {
			r.finish() // the worker may have read part of it: abandoned
		}
		return nil, nil, ps.err
	}
	select {
	case resp := <-ch:
		if be := resp.GetError(); be != nil {
			return nil, nil, batchError(be) // receive freed the regions
		}
		return resp, r, nil
	case <-ps.done:
		if r != nil {
			r.finish() // abandoned with the stream (or answered just now)
		}
		return nil, nil, ps.err
	case <-ctx.Done():
		// Tell the worker to abandon the batch (best effort), unless the
		// stream's side is closed already. Its regions stay with the
		// stream until the worker answers.
		ps.sendMu.Lock()
		ps.mu.Lock()
		_, waiting := ps.waiting[req.Id]
		delete(ps.waiting, req.Id)
		closed := ps.closed
		ps.mu.Unlock()
		if !closed && waiting {
			ps.s.Send(&codecv1.ProcessRequest{Id: req.Id, Work: &codecv1.ProcessRequest_Cancel{Cancel: &codecv1.CancelRequest{}}})
		}
		ps.sendMu.Unlock()
		if !waiting && r != nil {
			// The answer is on its way to ch: its regions are ours to free.
			select {
			case <-ch:
				r.done()
			case <-ps.done:
				r.finish()
			}
		}
		ps.closeIfDrained()
		return nil, nil, ctx.Err()
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
	err = c.decodeParts(ctx, spec, out, func(lo, hi int) *codecv1.DecodeRequest {
		return &codecv1.DecodeRequest{Spec: ps, Encoded: encoded[lo:hi]}
	}, selectedSize(spec, nil), nil)
	if err != nil {
		return nil, err
	}
	return out, nil
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
			resp, _, err := c.do(gctx, &codecv1.ProcessRequest{Work: &codecv1.ProcessRequest_Encode{Encode: &codecv1.EncodeRequest{Spec: ps, Chunks: codecsvc.ChunksToProto(chunks[r[0]:r[1]])}}}, nil)
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
