// Package storeserver serves any store (package storesvc) as the gRPC
// service zarrgate.store.v1.StoreService. Every request goes through the
// portable layer (storesvc.Wrap), every error leaves as a gRPC status with
// its code, and large GetPartialValues results go out through zarrgate's
// wire codec (internal/wire) without a copy on zarrgate's own servers, and
// as plain protobuf on any other gRPC server. Its client is package
// storesvc/remote.
package storeserver

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc"

	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/internal/wire"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/internal/storeproto"
)

// partialBatch is how many GetPartialValues requests the server hands the
// store at once, so that a call with many large ranges streams its results
// instead of holding them all.
const partialBatch = 256

// listBatch is how many keys one List* response carries at most.
const listBatch = 1000

var framePool = sync.Pool{New: func() any { b := make([]byte, storeproto.FrameSize); return &b }}

// Server serves a Store as zarrgate.store.v1.StoreService. Every request
// goes through the portable layer, and every error leaves as a gRPC status
// with its code.
type Server struct {
	storev1.UnimplementedStoreServiceServer
	s    *storesvc.Portable
	lend func() Segment // GetPartialValuesShared's segments; nil: none

	draining  chan struct{} // closed by Drain
	drainOnce sync.Once
}

// New returns a server for s.
func New(s storesvc.Store, opts ...Option) *Server {
	srv := &Server{s: storesvc.Wrap(s), draining: make(chan struct{})}
	for _, o := range opts {
		o(srv)
	}
	return srv
}

// Register registers the server on a gRPC server. A server that tells
// its services when it begins to shut down (internal/rpc's OnDrain) gets
// Drain registered too.
func (srv *Server) Register(g grpc.ServiceRegistrar) {
	storev1.RegisterStoreServiceServer(g, srv)
	if d, ok := g.(interface{ OnDrain(func()) }); ok {
		d.OnDrain(srv.Drain)
	}
}

// Drain ends the GetPartialValuesShared calls open, each once it has
// answered the read it is on (as if idle), and every later one after its
// first read: their clients go on through new calls, elsewhere once this
// server takes no more.
func (srv *Server) Drain() { srv.drainOnce.Do(func() { close(srv.draining) }) }

// GetCapabilities implements storev1.StoreServiceServer.
func (srv *Server) GetCapabilities(context.Context, *storev1.GetCapabilitiesRequest) (*storev1.GetCapabilitiesResponse, error) {
	return &storev1.GetCapabilitiesResponse{Capabilities: storeproto.CapabilitiesToProto(srv.s.Capabilities())}, nil
}

// Get implements storev1.StoreServiceServer.
func (srv *Server) Get(req *storev1.GetRequest, stream grpc.ServerStreamingServer[storev1.GetResponse]) error {
	r, err := storeproto.RangeFromProto(req.GetRange())
	if err != nil {
		return grpcerr.ToStatus(err)
	}
	obj, err := srv.s.Get(stream.Context(), req.GetKey(), r)
	if err != nil {
		return grpcerr.ToStatus(err)
	}
	defer obj.Close()
	bp := framePool.Get().(*[]byte)
	defer framePool.Put(bp)
	buf := *bp
	resp := &storev1.GetResponse{Info: &storev1.ValueInfo{
		Generation: obj.Generation, Size: uint64(obj.Size), Offset: uint64(obj.Offset), Length: uint64(obj.Length),
	}}
	remaining := obj.Length
	for first := true; first || remaining > 0; first = false {
		n := min(int64(len(buf)), remaining)
		if _, err := io.ReadFull(obj, buf[:n]); err != nil {
			return grpcerr.ToStatus(errs.Wrap(errs.Internal, err, "get %q", req.GetKey()))
		}
		remaining -= n
		resp.Data = buf[:n]
		// SendMsg serialises resp before returning, so buf can be reused.
		if err := stream.Send(resp); err != nil {
			return err
		}
		resp.Info = nil
	}
	return nil
}

// GetPartialValues implements storev1.StoreServiceServer.
func (srv *Server) GetPartialValues(req *storev1.GetPartialValuesRequest, stream grpc.ServerStreamingServer[storev1.GetPartialValuesResponse]) error {
	reqs := make([]storesvc.KeyRange, len(req.GetRanges()))
	for i, kr := range req.GetRanges() {
		r, err := storeproto.RangeFromProto(kr.GetRange())
		if err != nil {
			return grpcerr.ToStatus(err)
		}
		reqs[i] = storesvc.KeyRange{Key: kr.GetKey(), Range: r}
	}
	out := &partSender{stream: stream}
	for start := 0; start < len(reqs); start += partialBatch {
		batch := reqs[start:min(start+partialBatch, len(reqs))]
		vals, err := srv.s.GetPartialValues(stream.Context(), batch)
		if err != nil {
			return grpcerr.ToStatus(err)
		}
		for i, v := range vals {
			if err := out.add(uint32(start+i), v); err != nil {
				return err
			}
		}
	}
	return out.flush()
}

// partSender packs results into responses of about storeproto.FrameSize bytes. The
// values' data go out without a copy (they are fresh buffers from
// GetPartialValues that nobody modifies); pooled ones are recycled once
// gRPC has written every response holding a piece of them.
type partSender struct {
	stream grpc.ServerStreamingServer[storev1.GetPartialValuesResponse]
	resp   storev1.GetPartialValuesResponse
	bytes  int
	// held: the pooled values with parts in resp, each counting its
	// holders (the sender while it adds the value, and each response with
	// a part of it).
	held []*bufpool.Refs
}

func (p *partSender) add(index uint32, v storesvc.PartialValue) error {
	if !v.Found {
		p.resp.Parts = append(p.resp.Parts, &storev1.PartialValuePart{Index: index, Missing: true, Last: true})
		p.bytes += 16
		return p.maybeFlush()
	}
	var h *bufpool.Refs
	if v.Pooled() {
		// v.Release once the last response holding a piece is written: a
		// pooled value's buffer is bufpool's, put back by the count itself
		// (one allocation: not the value moved to the heap and a method
		// value besides).
		h = bufpool.NewBufRefs(1, v.Data)
		defer h.Release()
	}
	data, gen := v.Data, v.Generation
	for {
		n := min(len(data), storeproto.FrameSize-p.bytes)
		p.resp.Parts = append(p.resp.Parts, &storev1.PartialValuePart{Index: index, Data: data[:n], Last: n == len(data), Generation: gen})
		if h != nil {
			h.Hold()
			p.held = append(p.held, h)
		}
		gen = ""
		p.bytes += n + 16
		data = data[n:]
		if err := p.maybeFlush(); err != nil {
			return err
		}
		if len(data) == 0 {
			return nil
		}
	}
}

func (p *partSender) maybeFlush() error {
	if p.bytes >= storeproto.FrameSize {
		return p.flush()
	}
	return nil
}

func (p *partSender) flush() error {
	if len(p.resp.Parts) == 0 {
		return nil
	}
	held := p.held
	err := wire.Send(p.stream, &p.resp, func() {
		for _, h := range held {
			h.Release()
		}
	})
	p.resp.Parts, p.bytes, p.held = p.resp.Parts[:0], 0, nil
	return err
}

// Set implements storev1.StoreServiceServer. The value streams from the
// client into the store without being buffered here.
func (srv *Server) Set(stream grpc.ClientStreamingServer[storev1.SetRequest, storev1.SetResponse]) error {
	first, err := stream.Recv()
	if err == io.EOF {
		return grpcerr.ToStatus(errs.New(errs.InvalidArgument, "set: the stream ended before its header (key and condition)"))
	}
	if err != nil {
		return err
	}
	h := first.GetHeader()
	if h == nil {
		return grpcerr.ToStatus(errs.New(errs.InvalidArgument, "set: the first message must carry the header (key and condition)"))
	}
	r := &setReader{stream: stream, cur: first.GetData()}
	gen, err := srv.s.Set(stream.Context(), h.GetKey(), r, storeproto.ConditionFromProto(h.GetCondition()))
	if err != nil {
		return grpcerr.ToStatus(err)
	}
	return stream.SendAndClose(&storev1.SetResponse{Generation: gen})
}

// setReader reads a Set stream's data messages as one byte stream.
type setReader struct {
	stream grpc.ClientStreamingServer[storev1.SetRequest, storev1.SetResponse]
	cur    []byte
}

func (r *setReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		msg, err := r.stream.Recv()
		if err == io.EOF {
			return 0, err // the client closed its side
		}
		if err != nil {
			// A coded error (Canceled, DeadlineExceeded, ...), so that the
			// backend keeps the code without knowing gRPC.
			return 0, grpcerr.FromStatus(err)
		}
		if msg.GetHeader() != nil {
			return 0, errs.New(errs.InvalidArgument, "set: header sent twice")
		}
		r.cur = msg.GetData()
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// SetPartialValues implements storev1.StoreServiceServer.
func (srv *Server) SetPartialValues(ctx context.Context, req *storev1.SetPartialValuesRequest) (*storev1.SetPartialValuesResponse, error) {
	writes := make([]storesvc.PartialWrite, len(req.GetWrites()))
	for i, w := range req.GetWrites() {
		if w.GetOffset() > 1<<62 {
			return nil, grpcerr.ToStatus(errs.New(errs.InvalidArgument, "set_partial_values %q: offset %d too large", w.GetKey(), w.GetOffset()))
		}
		writes[i] = storesvc.PartialWrite{Key: w.GetKey(), Offset: int64(w.GetOffset()), Data: w.GetData()}
	}
	if err := srv.s.SetPartialValues(ctx, writes); err != nil {
		return nil, grpcerr.ToStatus(err)
	}
	return &storev1.SetPartialValuesResponse{}, nil
}

// Erase implements storev1.StoreServiceServer.
func (srv *Server) Erase(ctx context.Context, req *storev1.EraseRequest) (*storev1.EraseResponse, error) {
	if err := srv.s.Erase(ctx, req.GetKey(), storeproto.ConditionFromProto(req.GetCondition())); err != nil {
		return nil, grpcerr.ToStatus(err)
	}
	return &storev1.EraseResponse{}, nil
}

// EraseValues implements storev1.StoreServiceServer.
func (srv *Server) EraseValues(ctx context.Context, req *storev1.EraseValuesRequest) (*storev1.EraseValuesResponse, error) {
	if err := srv.s.EraseValues(ctx, req.GetKeys()); err != nil {
		return nil, grpcerr.ToStatus(err)
	}
	return &storev1.EraseValuesResponse{}, nil
}

// ErasePrefix implements storev1.StoreServiceServer.
func (srv *Server) ErasePrefix(ctx context.Context, req *storev1.ErasePrefixRequest) (*storev1.ErasePrefixResponse, error) {
	if err := srv.s.ErasePrefix(ctx, req.GetPrefix()); err != nil {
		return nil, grpcerr.ToStatus(err)
	}
	return &storev1.ErasePrefixResponse{}, nil
}

// List implements storev1.StoreServiceServer.
func (srv *Server) List(_ *storev1.ListRequest, stream grpc.ServerStreamingServer[storev1.ListResponse]) error {
	return srv.sendKeys(stream.Context(), "", func(keys []string) error {
		return stream.Send(&storev1.ListResponse{Keys: keys})
	})
}

// ListPrefix implements storev1.StoreServiceServer.
func (srv *Server) ListPrefix(req *storev1.ListPrefixRequest, stream grpc.ServerStreamingServer[storev1.ListPrefixResponse]) error {
	return srv.sendKeys(stream.Context(), req.GetPrefix(), func(keys []string) error {
		return stream.Send(&storev1.ListPrefixResponse{Keys: keys})
	})
}

func (srv *Server) sendKeys(ctx context.Context, prefix string, send func([]string) error) error {
	keys := make([]string, 0, listBatch)
	for k, err := range srv.s.ListPrefix(ctx, prefix) {
		if err != nil {
			return grpcerr.ToStatus(err)
		}
		keys = append(keys, k)
		if len(keys) == listBatch {
			if err := send(keys); err != nil {
				return err
			}
			keys = make([]string, 0, listBatch)
		}
	}
	if len(keys) > 0 {
		return send(keys)
	}
	return nil
}

// ListDir implements storev1.StoreServiceServer.
func (srv *Server) ListDir(req *storev1.ListDirRequest, stream grpc.ServerStreamingServer[storev1.ListDirResponse]) error {
	resp := &storev1.ListDirResponse{}
	for e, err := range srv.s.ListDir(stream.Context(), req.GetPrefix()) {
		if err != nil {
			return grpcerr.ToStatus(err)
		}
		if e.IsPrefix {
			resp.Prefixes = append(resp.Prefixes, e.Path)
		} else {
			resp.Keys = append(resp.Keys, e.Path)
		}
		if len(resp.Keys)+len(resp.Prefixes) == listBatch {
			if err := stream.Send(resp); err != nil {
				return err
			}
			resp = &storev1.ListDirResponse{}
		}
	}
	if len(resp.Keys)+len(resp.Prefixes) > 0 {
		return stream.Send(resp)
	}
	return nil
}
