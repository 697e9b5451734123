package storeserver_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"

	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/internal/shm"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/storesvc/remote"
	"github.com/zarrgate/zarrgate/storesvc/storeserver"
)

// testSegment is a real shared-memory segment (internal/shm) lent as
// gateway.SharedSegment lends one, which records how it was given back.
type testSegment struct {
	seg    *shm.Segment
	ring   *shm.Ring
	closed chan bool // Close's reusable
}

func newTestSegment(t *testing.T, size int64) *testSegment {
	t.Helper()
	seg, err := shm.Create(size)
	if err != nil {
		t.Fatal(err)
	}
	return &testSegment{seg: seg, ring: shm.NewRing(shm.DataOffset, size), closed: make(chan bool, 1)}
}

func (s *testSegment) Path() string  { return s.seg.Path }
func (s *testSegment) Size() int64   { return int64(len(s.seg.Data)) }
func (s *testSegment) Token() []byte { return s.seg.Token }
func (s *testSegment) TryAlloc(n int64) ([]byte, int64, bool) {
	if n > (s.Size()-shm.DataOffset)/4 {
		return nil, 0, false
	}
	off, _, ok := s.ring.TryAlloc(n)
	if !ok {
		return nil, 0, false
	}
	return s.seg.Data[off : off+n], off, true
}
func (s *testSegment) Release(n uint64) error            { return s.ring.Release(n) }
func (s *testSegment) Drained(ctx context.Context) error { return s.ring.Drained(ctx) }
func (s *testSegment) Close(reusable bool) {
	s.seg.Close()
	s.closed <- reusable
}

// serveShared serves backend with segments from lend (nil: none) through
// the real server stack on loopback TCP.
func serveShared(t *testing.T, backend storesvc.Store, lend func() storeserver.Segment) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	var opts []storeserver.Option
	if lend != nil {
		opts = append(opts, storeserver.WithSegments(lend))
	}
	storeserver.New(backend, opts...).Register(srv)
	go srv.Serve(lis)
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		srv.Stop()
	})
	return cc
}

// result is one answer of a read: missing, or the bytes and generation.
type result struct {
	missing bool
	data    []byte
	gen     string
	shared  bool
}

func (r result) String() string {
	if r.missing {
		return "missing"
	}
	return fmt.Sprintf("%d bytes %q gen %q", len(r.data), r.data[:min(len(r.data), 12)], r.gen)
}

// socketRead reads ranges with GetPartialValues.
func socketRead(ctx context.Context, st storev1.StoreServiceClient, ranges []*storev1.KeyRange) ([]result, error) {
	out := make([]result, len(ranges))
	s, err := st.GetPartialValues(ctx, &storev1.GetPartialValuesRequest{Ranges: ranges})
	if err != nil {
		return nil, err
	}
	for {
		resp, err := s.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		for _, p := range resp.GetParts() {
			r := &out[p.GetIndex()]
			r.missing = p.GetMissing()
			r.data = append(r.data, p.GetData()...)
			if p.GetGeneration() != "" {
				r.gen = p.GetGeneration()
			}
		}
	}
}

// sharedClient plays the client's side of GetPartialValuesShared.
type sharedClient struct {
	call     grpc.BidiStreamingClient[storev1.GetPartialValuesSharedRequest, storev1.GetPartialValuesSharedResponse]
	m        *shm.Mapping
	offered  bool
	release  bool   // release what it copied out (with the next read)
	held     uint64 // shared values copied out, not released
	received uint64 // shared values received in all
}

func (c *sharedClient) read(ranges []*storev1.KeyRange) ([]result, error) {
	msg := &storev1.GetPartialValuesSharedRequest{Read: &storev1.GetPartialValuesRequest{Ranges: ranges}}
	if c.release {
		msg.Release, c.held = c.held, 0
	}
	if err := c.call.Send(msg); err != nil && err != io.EOF {
		return nil, err
	}
	out := make([]result, len(ranges))
	for done := 0; done < len(ranges); {
		resp, err := c.call.Recv()
		if err != nil {
			return nil, err
		}
		for _, p := range resp.GetParts() {
			if int(p.GetIndex()) >= len(out) {
				return nil, fmt.Errorf("part of entry %d of %d", p.GetIndex(), len(out))
			}
			r := &out[p.GetIndex()]
			r.missing = p.GetMissing()
			if sh := p.GetShared(); sh != nil {
				if c.m == nil {
					return nil, errors.New("a shared value without an attached segment")
				}
				r.data = append(r.data, c.m.Data[sh.GetOffset():sh.GetOffset()+sh.GetLength()]...)
				r.shared = true
				c.held++
				c.received++
			} else {
				r.data = append(r.data, p.GetData()...)
			}
			if p.GetGeneration() != "" {
				r.gen = p.GetGeneration()
			}
			if p.GetLast() {
				done++
			}
		}
	}
	return out, nil
}

// openShared starts a call with its first read and answers the offer:
// attach maps the segment if one is offered.
func openShared(ctx context.Context, st storev1.StoreServiceClient, attach, release bool, ranges []*storev1.KeyRange) (*sharedClient, []result, error) {
	call, err := st.GetPartialValuesShared(ctx)
	if err != nil {
		return nil, nil, err
	}
	c := &sharedClient{call: call, release: release}
	if err := call.Send(&storev1.GetPartialValuesSharedRequest{Read: &storev1.GetPartialValuesRequest{Ranges: ranges}}); err != nil && err != io.EOF {
		return nil, nil, err
	}
	offer, err := call.Recv()
	if err != nil {
		return nil, nil, err
	}
	if seg := offer.GetSegment(); seg != nil {
		c.offered = true
		ok := false
		if attach {
			m, err := shm.Attach(seg.GetPath(), int64(seg.GetSize()), seg.GetToken())
			if err != nil {
				return nil, nil, err
			}
			c.m, ok = m, true
		}
		if err := call.Send(&storev1.GetPartialValuesSharedRequest{Attach: &ok}); err != nil && err != io.EOF {
			return nil, nil, err
		}
	}
	// The first read's answer follows; later reads send their own.
	out, err := c.answer(len(ranges))
	return c, out, err
}

// answer receives the answer of a read of n entries already sent.
func (c *sharedClient) answer(n int) ([]result, error) {
	ranges := make([]*storev1.KeyRange, n)
	call := c.call
	c.call = &noSend{call}
	defer func() { c.call = call }()
	return c.read(ranges)
}

// noSend is a call whose Send does nothing (answer's read only receives).
type noSend struct {
	grpc.BidiStreamingClient[storev1.GetPartialValuesSharedRequest, storev1.GetPartialValuesSharedResponse]
}

func (noSend) Send(*storev1.GetPartialValuesSharedRequest) error { return nil }

func (c *sharedClient) close() error {
	if c.m != nil {
		defer c.m.Close()
	}
	if c.release && c.held > 0 {
		c.call.Send(&storev1.GetPartialValuesSharedRequest{Release: c.held})
		c.held = 0
	}
	c.call.CloseSend()
	for {
		if _, err := c.call.Recv(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

func kr(key string, r *storev1.ByteRange) *storev1.KeyRange {
	return &storev1.KeyRange{Key: key, Range: r}
}

func bounded(off, n uint64) *storev1.ByteRange {
	return &storev1.ByteRange{Range: &storev1.ByteRange_Bounded_{Bounded: &storev1.ByteRange_Bounded{Offset: off, Length: n}}}
}

func fromOffset(off uint64) *storev1.ByteRange {
	return &storev1.ByteRange{Range: &storev1.ByteRange_FromOffset{FromOffset: off}}
}

func suffix(n uint64) *storev1.ByteRange {
	return &storev1.ByteRange{Range: &storev1.ByteRange_SuffixLength{SuffixLength: n}}
}

// sharedBackends are the two paths of the server: a backend without a
// batch read (file: each value read straight into the segment), and one
// with (a remote store: values copied in).
func sharedBackends(t *testing.T) map[string]storesvc.Store {
	t.Helper()
	dir := t.TempDir()
	fs, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	seedShared(t, fs)
	rs, err := remote.New(context.Background(), serveStore(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]storesvc.Store{"file": fs, "remote": rs}
}

// sizes of the seeded values: small, a chunk, one larger than a quarter of
// the test segment (inline), an empty one.
var sharedValues = map[string]int{"a/small": 100, "a/chunk": 40 << 10, "a/big": 300 << 10, "a/empty": 0, "b/c/0": 7000}

func seedShared(t *testing.T, s storesvc.Store) {
	t.Helper()
	for k, n := range sharedValues {
		v := make([]byte, n)
		for i := range v {
			v[i] = byte(i*7 + len(k))
		}
		if _, err := s.Set(context.Background(), k, bytes.NewReader(v), storesvc.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
}

// sharedReadsCases are reads of present, missing, ranged (bounded,
// from an offset, suffix), repeated and empty values.
func sharedReadsCases() [][]*storev1.KeyRange {
	return [][]*storev1.KeyRange{
		{kr("a/small", nil), kr("a/missing", nil), kr("a/chunk", nil)},
		{kr("a/chunk", bounded(100, 5000)), kr("a/chunk", fromOffset(40<<10-10)), kr("a/chunk", suffix(33)), kr("a/small", suffix(100))},
		{kr("a/big", nil), kr("a/empty", nil), kr("a/small", bounded(0, 0)), kr("b/c/0", nil), kr("a/small", nil)},
		{kr("a/missing", bounded(1, 2)), kr("a/chunk", nil), kr("a/chunk", nil), kr("a/chunk", nil), kr("a/chunk", nil), kr("a/chunk", nil)},
	}
}

// TestSharedEqualsSocket: GetPartialValuesShared answers every read as
// GetPartialValues does — present, missing, ranged (suffix ranges too),
// empty, repeated — through the segment when the client attaches it,
// inline when it does not or when none is offered, and values that do
// not fit the segment inline.
func TestSharedEqualsSocket(t *testing.T) {
	ctx := context.Background()
	for name, backend := range sharedBackends(t) {
		for _, mode := range []string{"attached", "declined", "no segment"} {
			t.Run(name+"/"+mode, func(t *testing.T) {
				var seg *testSegment
				var lend func() storeserver.Segment
				if mode != "no segment" {
					seg = newTestSegment(t, 256<<10) // a quarter: 64 KiB; a/big goes inline
					lend = func() storeserver.Segment { return seg }
				}
				st := storev1.NewStoreServiceClient(serveShared(t, backend, lend))
				reads := sharedReadsCases()
				c, got, err := openShared(ctx, st, mode == "attached", true, reads[0])
				if err != nil {
					t.Fatal(err)
				}
				if c.offered != (mode != "no segment") {
					t.Errorf("offered %v", c.offered)
				}
				for i, rs := range reads {
					if i > 0 {
						if got, err = c.read(rs); err != nil {
							t.Fatalf("read %d: %v", i, err)
						}
					}
					want, err := socketRead(ctx, st, rs)
					if err != nil {
						t.Fatal(err)
					}
					for j := range rs {
						if got[j].missing != want[j].missing || !bytes.Equal(got[j].data, want[j].data) || got[j].gen != want[j].gen {
							t.Errorf("read %d entry %d (%s): got %v, GetPartialValues %v", i, j, rs[j].GetKey(), got[j], want[j])
						}
						wantShared := mode == "attached" && !want[j].missing && len(want[j].data) > 0 && len(want[j].data) <= 64<<10
						if got[j].shared != wantShared {
							t.Errorf("read %d entry %d (%d bytes): shared %v, want %v", i, j, len(want[j].data), got[j].shared, wantShared)
						}
					}
				}
				if err := c.close(); err != nil {
					t.Fatal(err)
				}
				if seg != nil {
					if reusable := <-seg.closed; !reusable {
						t.Error("segment not reusable after every value was released")
					}
				}
			})
		}
	}
}

// TestSharedErrors: a read GetPartialValues fails (a range past the end,
// a bad key, a bad range) fails the shared call with the same code.
func TestSharedErrors(t *testing.T) {
	ctx := context.Background()
	for name, backend := range sharedBackends(t) {
		t.Run(name, func(t *testing.T) {
			st := storev1.NewStoreServiceClient(serveShared(t, backend, func() storeserver.Segment { return newTestSegment(t, 256<<10) }))
			for _, rs := range [][]*storev1.KeyRange{
				{kr("a/small", nil), kr("a/small", bounded(50, 100))},
				{kr("a/small", nil), kr("a/../x", nil)},
				{kr("a/small", nil), kr("a/small", suffix(101))},
			} {
				_, wantErr := socketRead(ctx, st, rs)
				want := status.Code(wantErr)
				if want == codes.OK {
					t.Fatalf("%v: GetPartialValues succeeded", rs)
				}
				// As the first read and as a later one.
				_, _, err := openShared(ctx, st, true, true, rs)
				if status.Code(err) != want {
					t.Errorf("%v first: %v, GetPartialValues %v", rs, err, wantErr)
				}
				c, _, err := openShared(ctx, st, true, true, []*storev1.KeyRange{kr("a/chunk", nil)})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.read(rs); status.Code(err) != want {
					t.Errorf("%v later: %v, GetPartialValues %v", rs, err, wantErr)
				}
				c.m.Close()
			}
		})
	}
}

// TestSharedNeverReleased: a client that maps the segment and never
// releases gets every answer all the same (inline once the segment is
// full: the server never waits for it), and, idle, loses the call: the
// server ends it and gives the segment back, not for reuse (the client
// may still read it). The server holds nothing but the segment.
func TestSharedNeverReleased(t *testing.T) {
	defer storeserver.SetSharedIdle(200 * time.Millisecond)()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a hang
	defer cancel()
	backend := sharedBackends(t)["file"]
	seg := newTestSegment(t, 256<<10)
	st := storev1.NewStoreServiceClient(serveShared(t, backend, func() storeserver.Segment { return seg }))
	chunk := []*storev1.KeyRange{kr("a/chunk", nil), kr("a/chunk", nil)}
	c, _, err := openShared(ctx, st, true, false, chunk)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ { // 40 × 40 KiB: six times the segment
		got, err := c.read(chunk)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if len(got[0].data) != 40<<10 || len(got[1].data) != 40<<10 {
			t.Fatalf("read %d: %v", i, got)
		}
	}
	if c.received == 0 || c.received >= 42 {
		t.Errorf("%d of 42 values shared: want the segment used, then inline", c.received)
	}
	// Idle: the server ends the call.
	if _, err := c.call.Recv(); err != io.EOF {
		t.Errorf("idle call ended with %v, want a clean end", err)
	}
	if reusable := <-seg.closed; reusable {
		t.Error("a segment with unreleased values was kept for reuse")
	}
	c.m.Close()
}

// TestSharedProtocolErrors: a client that breaks the protocol ends its
// call with InvalidArgument (FailedPrecondition if it never answers the
// offer), and the segment is not reused.
func TestSharedProtocolErrors(t *testing.T) {
	defer storeserver.SetSharedIdle(200 * time.Millisecond)()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	backend := sharedBackends(t)["file"]
	read := &storev1.GetPartialValuesRequest{Ranges: []*storev1.KeyRange{kr("a/small", nil)}}
	yes := true
	for _, tc := range []struct {
		name string
		msgs []*storev1.GetPartialValuesSharedRequest // after the first read and the offer
		want codes.Code
	}{
		{"release too many", []*storev1.GetPartialValuesSharedRequest{{Attach: &yes}, {Release: 2}}, codes.InvalidArgument},
		{"attach twice", []*storev1.GetPartialValuesSharedRequest{{Attach: &yes}, {Attach: &yes}}, codes.InvalidArgument},
		{"read for an attach", []*storev1.GetPartialValuesSharedRequest{{Read: read}}, codes.InvalidArgument},
		{"no answer", nil, codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seg := newTestSegment(t, 256<<10)
			st := storev1.NewStoreServiceClient(serveShared(t, backend, func() storeserver.Segment { return seg }))
			call, err := st.GetPartialValuesShared(ctx)
			if err != nil {
				t.Fatal(err)
			}
			call.Send(&storev1.GetPartialValuesSharedRequest{Read: read})
			for _, m := range tc.msgs {
				call.Send(m)
			}
			for {
				if _, err = call.Recv(); err != nil {
					break
				}
			}
			if status.Code(err) != tc.want {
				t.Errorf("%v, want %v", err, tc.want)
			}
			if <-seg.closed {
				t.Error("segment reused after a broken call")
			}
		})
	}
	// The first message must be a read.
	st := storev1.NewStoreServiceClient(serveShared(t, backend, nil))
	call, err := st.GetPartialValuesShared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	call.Send(&storev1.GetPartialValuesSharedRequest{Attach: &yes})
	_, err = call.Recv()
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "first message") {
		t.Errorf("first message an attach: %v", err)
	}
}

// TestSharedDrain: when the server begins to shut down, an open
// GetPartialValuesShared call ends cleanly once its read is answered (not
// after the idle time, here an hour), its segment given back.
func TestSharedDrain(t *testing.T) {
	defer storeserver.SetSharedIdle(time.Hour)()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds a hang
	defer cancel()
	backend := sharedBackends(t)["file"]
	seg := newTestSegment(t, 256<<10)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	ss := storeserver.New(backend, storeserver.WithSegments(func() storeserver.Segment { return seg }))
	ss.Register(srv)
	go srv.Serve(lis)
	defer srv.Stop()
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c, got, err := openShared(ctx, storev1.NewStoreServiceClient(cc), true, true, []*storev1.KeyRange{kr("a/chunk", nil)})
	if err != nil || len(got[0].data) != 40<<10 || !got[0].shared {
		t.Fatalf("%v, %v", got, err)
	}
	ss.Drain()
	if _, err := c.call.Recv(); err != io.EOF {
		t.Errorf("drained call ended with %v, want a clean end", err)
	}
	<-seg.closed // given back (not for reuse: the value was not released)
	c.m.Close()
}

// embedding wraps a store as the gateway's StoreService pass-through does
// (a struct embedding a *storesvc.Portable).
type embedding struct{ *storesvc.Portable }

// TestSharedFindsTheBackend: GetPartialValuesShared reads each value
// straight into the segment unless the backend under every wrapper has a
// batch read of its own: a file store behind the gateway's wrappers reads
// one by one, a remote store in batches.
func TestSharedFindsTheBackend(t *testing.T) {
	b := sharedBackends(t)
	for name, tc := range map[string]struct {
		s    storesvc.Store
		want bool
	}{
		"file":                        {b["file"], false},
		"file, wrapped as by gateway": {storesvc.Wrap(embedding{storesvc.Wrap(b["file"])}), false},
		"remote":                      {b["remote"], true},
		"remote, wrapped":             {storesvc.Wrap(embedding{storesvc.Wrap(b["remote"])}), true},
	} {
		if got := storeserver.BatchReads(tc.s); got != tc.want {
			t.Errorf("%s: batch reads %v, want %v", name, got, tc.want)
		}
	}
}
