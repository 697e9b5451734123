package codecsvc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc"

	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/wire"
	"github.com/zarrgate/zarrgate/zarr"
)

// Server serves an Engine as zarrgate.codec.v1.CodecService: the codec
// worker.
type Server struct {
	codecv1.UnimplementedCodecServiceServer
	e Engine
	// inflight bounds the batches a Process stream works on at once.
	inflight int
}

// NewServer returns the CodecService of e.
func NewServer(e Engine) *Server { return &Server{e: e, inflight: 2 * runtime.GOMAXPROCS(0)} }

// Register registers the service.
func (s *Server) Register(r grpc.ServiceRegistrar) { codecv1.RegisterCodecServiceServer(r, s) }

// SpecToProto converts a batch spec for the wire.
func SpecToProto(s *BatchSpec) (*codecv1.ChunkSpec, error) {
	codecs, err := json.Marshal(s.Codecs)
	if err != nil {
		return nil, err
	}
	shape := make([]uint64, len(s.Shape))
	for i, d := range s.Shape {
		shape[i] = uint64(d)
	}
	return &codecv1.ChunkSpec{DataType: s.DataType.Name, ChunkShape: shape, FillValue: s.FillValue, CodecsJson: string(codecs)}, nil
}

// SpecFromProto converts a spec from the wire.
func SpecFromProto(p *codecv1.ChunkSpec) (*BatchSpec, error) {
	dt, err := zarr.ParseDataType(p.GetDataType())
	if err != nil {
		return nil, err
	}
	var codecs []zarr.CodecSpec
	if err := json.Unmarshal([]byte(p.GetCodecsJson()), &codecs); err != nil {
		return nil, errs.New(errs.InvalidArgument, "codecs_json: not a JSON array of codecs: %v", err)
	}
	s := &BatchSpec{Codecs: codecs, DataType: dt, FillValue: p.GetFillValue(), Shape: make([]int64, len(p.GetChunkShape()))}
	for i, d := range p.GetChunkShape() {
		if d > 1<<40 {
			return nil, errs.New(errs.InvalidArgument, "chunk_shape dimension %d: %d is too large", i, d)
		}
		s.Shape[i] = int64(d)
	}
	return s, nil
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

func (s *Server) decode(ctx context.Context, req *codecv1.DecodeRequest) (*codecv1.DecodeResponse, error) {
	spec, err := SpecFromProto(req.GetSpec())
	if err != nil {
		return nil, err
	}
	chunks, err := s.e.Decode(ctx, spec, req.GetEncoded())
	if err != nil {
		return nil, err
	}
	return &codecv1.DecodeResponse{Chunks: ChunksToProto(chunks)}, nil
}

func (s *Server) encode(ctx context.Context, req *codecv1.EncodeRequest) (*codecv1.EncodeResponse, error) {
	spec, err := SpecFromProto(req.GetSpec())
	if err != nil {
		return nil, err
	}
	encoded, err := s.e.Encode(ctx, spec, ChunksFromProto(req.GetChunks()))
	if err != nil {
		return nil, err
	}
	return &codecv1.EncodeResponse{Encoded: encoded}, nil
}

// Decode implements codecv1.CodecServiceServer.
func (s *Server) Decode(ctx context.Context, req *codecv1.DecodeRequest) (*codecv1.DecodeResponse, error) {
	resp, err := s.decode(ctx, req)
	return resp, errs.ToStatus(err)
}

// Encode implements codecv1.CodecServiceServer.
func (s *Server) Encode(ctx context.Context, req *codecv1.EncodeRequest) (*codecv1.EncodeResponse, error) {
	resp, err := s.encode(ctx, req)
	return resp, errs.ToStatus(err)
}

// Process implements codecv1.CodecServiceServer: batches are worked on
// concurrently, up to a bound, and answered as they finish. A failed batch
// is answered with its error; the stream goes on. Each batch runs under its
// caller's deadline (deadline_unix_nanos) and stops when the caller cancels
// it, so a caller's deadline or cancellation reaches the worker although
// the stream outlives the call.
func (s *Server) Process(stream grpc.BidiStreamingServer[codecv1.ProcessRequest, codecv1.ProcessResponse]) error {
	ctx := stream.Context()
	var sendMu, runMu sync.Mutex
	running := make(map[uint64]context.CancelFunc)
	var wg sync.WaitGroup
	sem := make(chan struct{}, s.inflight)
	var sendErr error
	defer wg.Wait()
	for {
		req, err := stream.Recv()
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
			switch w := req.GetWork().(type) {
			case *codecv1.ProcessRequest_Decode:
				var r *codecv1.DecodeResponse
				if r, err = s.decode(bctx, w.Decode); err == nil {
					resp.Result = &codecv1.ProcessResponse_Decode{Decode: r}
				}
			case *codecv1.ProcessRequest_Encode:
				var r *codecv1.EncodeResponse
				if r, err = s.encode(bctx, w.Encode); err == nil {
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
			// bytes, never modified: sent without a copy.
			if e := stream.SendMsg(wire.ByRef{Msg: resp}); e != nil && sendErr == nil {
				sendErr = e
			}
		}()
	}
}

func isEOF(err error) bool { return errors.Is(err, io.EOF) }

// BatchErrorToProto turns a batch failure into its wire form, keeping the
// code and the index of the failing item.
func BatchErrorToProto(err error) *codecv1.BatchError {
	be := &codecv1.BatchError{Code: int32(errs.Code(err)), Message: err.Error()}
	var ie *ItemError
	if errors.As(err, &ie) {
		i := int32(ie.Index)
		be.ItemIndex = &i
	}
	return be
}
