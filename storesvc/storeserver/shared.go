package storeserver

import (
	"bytes"
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"

	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/internal/storeproto"
)

// Segment is a shared-memory segment lent to one GetPartialValuesShared
// call (gateway.SharedSegment is one): its memory is reserved when it is
// made, and values are copied into its ring, which the client releases
// oldest first.
type Segment interface {
	// Path, Size and Token are the offer a client maps (shm.Attach).
	Path() string
	Size() int64
	Token() []byte
	// TryAlloc returns n bytes of the ring and their offset, or ok false
	// if they do not fit now; it never waits.
	TryAlloc(n int64) (buf []byte, off int64, ok bool)
	// Release frees the n oldest allocations; more than are outstanding
	// is an error.
	Release(n uint64) error
	// Drained returns nil once every allocation is released.
	Drained(ctx context.Context) error
	// Close ends the call's use of the segment: kept for a later call if
	// reusable (the client holds none of it any more).
	Close(reusable bool)
}

// Option configures a Server.
type Option func(*Server)

// WithSegments lets GetPartialValuesShared lend segments from lend, which
// returns nil when none is to be had (shared memory off, all in use, or
// none can be made): values then go inline. Without it, every
// GetPartialValuesShared value goes inline.
func WithSegments(lend func() Segment) Option {
	return func(s *Server) { s.lend = lend }
}

// sharedIdle is how long a GetPartialValuesShared call waits for the
// client's next read before it ends, giving its segment back.
var sharedIdle = 2 * time.Second

// errIdle ends an idle GetPartialValuesShared call.
var errIdle = errors.New("idle")

type sharedStream = grpc.BidiStreamingServer[storev1.GetPartialValuesSharedRequest, storev1.GetPartialValuesSharedResponse]

// GetPartialValuesShared implements storev1.StoreServiceServer: reads as
// GetPartialValues's, over one stream, the values' bytes in a segment of
// shared memory when the client maps it.
func (srv *Server) GetPartialValuesShared(stream sharedStream) (err error) {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	msgs := make(chan *storev1.GetPartialValuesSharedRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	// next waits for the client's next message; with idle set, for that
	// long at most, and ending (errIdle) if the server drains.
	// One timer for the call's waits (since Go 1.23 a Reset timer sends
	// nothing stale).
	idleTimer := time.NewTimer(time.Hour)
	idleTimer.Stop()
	defer idleTimer.Stop()
	next := func(idle time.Duration, drainable bool) (*storev1.GetPartialValuesSharedRequest, error) {
		var timeout <-chan time.Time
		var drain <-chan struct{}
		if drainable {
			drain = srv.draining
		}
		if idle > 0 {
			idleTimer.Reset(idle)
			defer idleTimer.Stop()
			timeout = idleTimer.C
		}
		select {
		case m := <-msgs:
			return m, nil
		case err := <-recvErr:
			return nil, err
		case <-timeout:
			return nil, errIdle
		case <-drain:
			return nil, errIdle
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}

	first, err := next(0, false)
	if err != nil {
		return err
	}
	if first.GetRead() == nil || first.Attach != nil || first.GetRelease() != 0 {
		return grpcerr.ToStatus(errs.New(errs.InvalidArgument, "get_partial_values_shared: the first message must be a read, and only a read"))
	}
	var seg Segment
	if srv.lend != nil {
		seg = srv.lend()
	}
	defer func() {
		if seg != nil {
			done, stop := context.WithCancel(context.Background())
			stop()
			// Reused only after a clean end with every value released.
			seg.Close(err == nil && seg.Drained(done) == nil)
		}
	}()
	offer := &storev1.GetPartialValuesSharedResponse{}
	if seg != nil {
		offer.Segment = &storev1.SharedSegment{Path: seg.Path(), Size: uint64(seg.Size()), Token: seg.Token()}
	}
	if err := stream.Send(offer); err != nil {
		return err
	}
	if seg != nil {
		m, err := next(sharedIdle, false)
		if errors.Is(err, errIdle) {
			return grpcerr.ToStatus(errs.New(errs.FailedPrecondition, "get_partial_values_shared: no answer to the segment offer in %v", sharedIdle))
		}
		if err != nil {
			return err
		}
		if m.Attach == nil || m.GetRead() != nil || m.GetRelease() != 0 {
			return grpcerr.ToStatus(errs.New(errs.InvalidArgument, "get_partial_values_shared: the second message must answer the segment offer (attach), and only that"))
		}
		if !m.GetAttach() {
			seg.Close(true)
			seg = nil
		}
	}
	out := &sharedSender{stream: stream}
	defer out.free()
	read := first.GetRead()
	for {
		if read != nil {
			if err := srv.answerShared(ctx, out, seg, read); err != nil {
				return grpcerr.ToStatus(err)
			}
		}
		m, err := next(sharedIdle, true)
		switch {
		case errors.Is(err, errIdle), err == io.EOF:
			return nil
		case err != nil:
			return err
		}
		if m.Attach != nil {
			return grpcerr.ToStatus(errs.New(errs.InvalidArgument, "get_partial_values_shared: attach answers the offer only, once"))
		}
		if n := m.GetRelease(); n > 0 {
			if seg == nil {
				return grpcerr.ToStatus(errs.New(errs.InvalidArgument, "get_partial_values_shared: release of %d values without an attached segment", n))
			}
			if err := seg.Release(n); err != nil {
				return grpcerr.ToStatus(errs.Wrap(errs.InvalidArgument, err, "get_partial_values_shared"))
			}
		}
		read = m.GetRead()
	}
}

// answerShared answers one read: the values in request order, each in the
// segment if it fits now, inline if not.
func (srv *Server) answerShared(ctx context.Context, out *sharedSender, seg Segment, req *storev1.GetPartialValuesRequest) error {
	reqs := make([]storesvc.KeyRange, len(req.GetRanges()))
	for i, kr := range req.GetRanges() {
		r, err := storeproto.RangeFromProto(kr.GetRange())
		if err != nil {
			return err
		}
		reqs[i] = storesvc.KeyRange{Key: kr.GetKey(), Range: r}
	}
	if batchReads(srv.s) {
		// A backend with a batch read of its own (object stores, remote
		// stores): one batch read, the values copied into the segment.
		for start := 0; start < len(reqs); start += partialBatch {
			batch := reqs[start:min(start+partialBatch, len(reqs))]
			vals, err := srv.s.GetPartialValues(ctx, batch)
			if err != nil {
				return err
			}
			for i := range vals {
				v := &vals[i]
				if err == nil {
					err = out.value(uint32(start+i), seg, v.Found, v.Generation, int64(len(v.Data)), bytes.NewReader(v.Data), batch[i].Key)
				}
				v.Release()
			}
			if err != nil {
				return err
			}
		}
		return out.flush()
	}
	// Validate the whole read first, as GetPartialValues does, so that a
	// bad key fails the read before anything is sent.
	for _, r := range reqs {
		if err := storesvc.ValidateKey(r.Key); err != nil {
			return err
		}
		if err := r.Range.Validate(); err != nil {
			return err
		}
	}
	for i, r := range reqs {
		obj, err := srv.s.Get(ctx, r.Key, r.Range)
		if errors.Is(err, storesvc.ErrNotFound) {
			if err := out.value(uint32(i), seg, false, "", 0, nil, r.Key); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		err = out.value(uint32(i), seg, true, obj.Generation, obj.Length, obj, r.Key)
		obj.Close()
		if err != nil {
			return err
		}
	}
	return out.flush()
}

// sharedSender packs a GetPartialValuesShared call's parts into responses
// of about storeproto.FrameSize bytes of inline data (or that many bytes
// placed in the segment).
type sharedSender struct {
	stream sharedStream
	resp   storev1.GetPartialValuesSharedResponse
	bytes  int64
	frame  *[]byte // inline data of resp (stream.Send copies it out)
	used   int
}

// value sends the result of one entry: missing, or the n bytes of src
// (a value or its range), read straight into the segment, or into inline
// frames if it does not fit the segment now.
func (p *sharedSender) value(index uint32, seg Segment, found bool, gen string, n int64, src io.Reader, key string) error {
	if !found {
		p.resp.Parts = append(p.resp.Parts, &storev1.SharedValuePart{Index: index, Missing: true, Last: true})
		p.bytes += 16
		return p.maybeFlush()
	}
	if seg != nil && n > 0 {
		if buf, off, ok := seg.TryAlloc(n); ok {
			// Allocations are released by the client in the order they
			// were sent: if the read fails, the call fails and the
			// segment is not reused.
			if _, err := io.ReadFull(src, buf); err != nil {
				return errs.Wrap(errs.DataLoss, err, "get %q: read %d bytes", key, n)
			}
			p.resp.Parts = append(p.resp.Parts, &storev1.SharedValuePart{Index: index, Last: true, Generation: gen,
				Shared: &storev1.SharedValue{Offset: uint64(off), Length: uint64(n)}})
			p.bytes += n
			return p.maybeFlush()
		}
	}
	// Inline, in pieces that fill the frames (stream.Send copies each out).
	if p.frame == nil {
		p.frame = framePool.Get().(*[]byte)
	}
	frame := *p.frame
	for first := true; first || n > 0; first = false {
		if p.used == len(frame) {
			if err := p.flush(); err != nil {
				return err
			}
		}
		k := min(n, int64(len(frame)-p.used))
		dst := frame[p.used : int64(p.used)+k]
		if _, err := io.ReadFull(src, dst); err != nil {
			return errs.Wrap(errs.DataLoss, err, "get %q: read %d bytes", key, k)
		}
		n -= k
		p.used += int(k)
		part := &storev1.SharedValuePart{Index: index, Data: dst, Last: n == 0}
		if first {
			part.Generation = gen
		}
		p.resp.Parts = append(p.resp.Parts, part)
		p.bytes += k + 16
		if err := p.maybeFlush(); err != nil {
			return err
		}
	}
	return nil
}

func (p *sharedSender) maybeFlush() error {
	if p.bytes >= storeproto.FrameSize {
		return p.flush()
	}
	return nil
}

func (p *sharedSender) flush() error {
	if len(p.resp.Parts) == 0 {
		return nil
	}
	err := p.stream.Send(&p.resp)
	clear(p.resp.Parts)
	p.resp.Parts, p.bytes, p.used = p.resp.Parts[:0], 0, 0
	return err
}

func (p *sharedSender) free() {
	if p.frame != nil {
		framePool.Put(p.frame)
		p.frame = nil
	}
}

// batchReads reports whether the backend under s's wrappers (each
// Portable, and wrappers that embed one) has a batch read of its own: a
// store that fetches many values at once (object stores, remote stores)
// rather than one Get after another (files).
func batchReads(s storesvc.Store) bool {
	for range 16 { // wrappers do not nest deeper
		u, ok := s.(interface{ Unwrap() storesvc.Store })
		if !ok {
			break
		}
		s = u.Unwrap()
	}
	_, ok := s.(storesvc.PartialReader)
	return ok
}
