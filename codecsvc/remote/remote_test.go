package remote_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/codecsvc/remote"
	"github.com/zarrgate/zarrgate/codecsvc/remote/remotetest"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/zarr"
)

func serveWorker(t testing.TB) *grpc.ClientConn { return serveWorkerOn(t, "tcp") }

// serveWorkerOn serves a codec worker on loopback TCP or, for "unix", on
// a unix socket.
func serveWorkerOn(t testing.TB, network string) *grpc.ClientConn {
	return remotetest.ServeWorker(t, network)
}

func spec(codecs string, shape ...int64) *codec.BatchSpec {
	var cs []zarr.CodecSpec
	json.Unmarshal([]byte(codecs), &cs)
	return &codec.BatchSpec{Codecs: cs, Shape: shape, DataType: zarr.MustDataType("float32"), FillValue: make([]byte, 4)}
}

const zstdChain = `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}]`

func floats(n int, seed float64) []byte {
	b := make([]byte, 0, 4*n)
	for i := range n {
		v := math.Float32bits(float32(math.Sin(float64(i)*0.001+seed) * 1000))
		b = append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
	}
	return b
}

// The remote engine gives the same bytes as the local one, with many
// batches in flight on one stream.
func TestRemoteMatchesLocal(t *testing.T) {
	ctx := context.Background()
	r := remote.New(serveWorker(t))
	defer r.Close()
	l := codecsvc.NewLocal()
	s := spec(zstdChain, 64, 64)
	var wg sync.WaitGroup
	errc := make(chan error, 32)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			chunks := []codec.Chunk{{Data: floats(4096, float64(g))}, {Data: floats(4096, float64(g)+0.5)}}
			want, _ := l.Encode(ctx, s, chunks)
			got, err := r.Encode(ctx, s, chunks)
			if err != nil {
				errc <- err
				return
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					errc <- fmt.Errorf("batch %d chunk %d: remote encoding differs", g, i)
					return
				}
			}
			dec, err := r.Decode(ctx, s, got)
			if err != nil || !bytes.Equal(dec[1].Data, chunks[1].Data) {
				errc <- fmt.Errorf("batch %d: decode: %v", g, err)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

// A large batch is split so no message exceeds the limits.
func TestRemoteSplitsLargeBatches(t *testing.T) {
	ctx := context.Background()
	r := remote.New(serveWorker(t))
	s := spec(`[{"name":"bytes","configuration":{"endian":"little"}}]`, 1024, 1024) // 4 MiB a chunk
	chunks := make([]codec.Chunk, 12)                                               // 48 MiB in all
	for i := range chunks {
		chunks[i] = codec.Chunk{Data: floats(1<<20, float64(i))}
	}
	enc, err := r.Encode(ctx, s, chunks)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := r.Decode(ctx, s, enc)
	if err != nil || !bytes.Equal(dec[11].Data, chunks[11].Data) {
		t.Fatalf("48 MiB batch: %v", err)
	}
}

// Errors keep their code across the wire, and the failing chunk's index.
func TestRemoteErrors(t *testing.T) {
	ctx := context.Background()
	cc := serveWorker(t)
	r := remote.New(cc)
	s := spec(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]`, 16)
	enc, _ := r.Encode(ctx, s, []codec.Chunk{{Data: floats(16, 1)}, {Data: floats(16, 2)}, {Data: floats(16, 3)}})
	enc[2] = append([]byte(nil), enc[2]...)
	enc[2][5] ^= 1
	_, err := r.Decode(ctx, s, enc)
	var ie *codec.ItemError
	if !errors.As(err, &ie) || ie.Index != 2 || !errors.Is(err, errs.DataLoss) {
		t.Fatalf("corrupt third chunk: %v", err)
	}
	_, err = r.Decode(ctx, spec(`[{"name":"bytes"},{"name":"lzham"}]`, 4), [][]byte{{1}})
	if !errors.Is(err, errs.Unimplemented) {
		t.Fatalf("unknown codec: %v", err)
	}
	// The stream goes on after failed batches.
	if _, err := r.Encode(ctx, s, []codec.Chunk{{Data: floats(16, 1)}}); err != nil {
		t.Fatalf("after failures: %v", err)
	}
	// Unary calls too.
	c := codecv1.NewCodecServiceClient(cc)
	ps, _ := codecsvc.SpecToProto(s)
	resp, err := c.Encode(ctx, &codecv1.EncodeRequest{Spec: ps, Chunks: []*codecv1.Chunk{{Data: floats(16, 1)}}})
	if err != nil || len(resp.GetEncoded()) != 1 {
		t.Fatalf("unary Encode: %v", err)
	}
	if _, err := c.Decode(ctx, &codecv1.DecodeRequest{Spec: &codecv1.ChunkSpec{DataType: "float32", CodecsJson: "{"}}); err == nil {
		t.Fatal("malformed spec accepted")
	}
}

// BenchmarkBatchDecode compares decoding batches of 16 chunks of 256 KiB
// (float32) in-process and through a codec worker on loopback, for codecs
// of different cost.
func BenchmarkBatchDecode(b *testing.B) {
	ctx := context.Background()
	l := codecsvc.NewLocal()
	w := remote.New(serveWorker(b))
	chains := []struct{ name, codecs string }{
		{"zstd", zstdChain},
		{"gzip", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":5}}]`},
		{"blosc-lz4", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":4,"blocksize":0}}]`},
	}
	for _, c := range chains {
		s := spec(c.codecs, 256, 256)
		chunks := make([]codec.Chunk, 16)
		for i := range chunks {
			chunks[i] = codec.Chunk{Data: floats(256*256, float64(i))}
		}
		enc, _ := l.Encode(ctx, s, chunks)
		for _, e := range []struct {
			name string
			e    codec.Engine
		}{{"in-process", l}, {"worker-loopback", w}} {
			b.Run(c.name+"/"+e.name, func(b *testing.B) {
				b.SetBytes(16 * 256 * 256 * 4)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := e.e.Decode(ctx, s, enc); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}

// recording wraps an engine and reports how each Encode call (a part of
// the caller's batch: the client splits large batches) ended. Each part
// is slow, whatever the machine: it waits a minute for its context before
// encoding.
type recording struct {
	codec.Engine
	started *atomic.Int64
	ended   chan error
}

func (r recording) Encode(ctx context.Context, s *codec.BatchSpec, c []codec.Chunk) ([][]byte, error) {
	r.started.Add(1)
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute):
	}
	out, err := r.Engine.Encode(ctx, s, c)
	r.ended <- err // nil if the worker ran the whole batch
	return out, err
}

// A caller's deadline and cancellation reach the worker, although batches
// travel on streams that outlive the call: the worker abandons the batch.
func TestDeadlineAndCancelReachWorker(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := recording{Engine: codecsvc.NewLocal(), started: new(atomic.Int64), ended: make(chan error, 64)}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	codecsvc.NewServer(rec).Register(srv)
	go srv.Serve(lis)
	defer srv.Stop()
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	r := remote.New(cc)
	defer r.Close()
	// A batch of 64 chunks of 1 MiB, which the client splits into parts
	// (each slow: recording).
	s := spec(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":9}}]`, 512, 512)
	chunks := make([]codec.Chunk, 64)
	for i := range chunks {
		b := make([]byte, 1<<20)
		for k := range b {
			b[k] = byte((k*7919 + i*104729) >> 3)
		}
		chunks[i] = codec.Chunk{Data: b}
	}
	for _, how := range []string{"deadline", "cancel"} {
		var ctx context.Context
		var cancel context.CancelFunc
		if how == "deadline" {
			ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
		} else {
			ctx, cancel = context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
		}
		start := time.Now()
		_, err := r.Encode(ctx, s, chunks)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: caller got %v", how, err)
		}
		// Every part the worker began ends abandoned, long before its
		// minute is up.
		for got := int64(0); got == 0 || got < rec.started.Load(); got++ {
			select {
			case werr := <-rec.ended:
				if !errors.Is(werr, context.DeadlineExceeded) && !errors.Is(werr, context.Canceled) {
					t.Fatalf("%s: the worker ran the whole batch after its caller gave up (%v)", how, werr)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: the worker never returned", how)
			}
		}
		t.Logf("%s: the worker abandoned its %d parts of the batch %v after the call began", how, rec.started.Swap(0), time.Since(start))
	}
}

// counting wraps an engine, counts its Decode batches, and can be slow.
type counting struct {
	codec.Engine
	delay time.Duration
	n     *atomic.Int64
}

func (c counting) Decode(ctx context.Context, s *codec.BatchSpec, e [][]byte) ([]codec.Chunk, error) {
	c.n.Add(1)
	time.Sleep(c.delay)
	return c.Engine.Decode(ctx, s, e)
}

// With two workers, one ten times slower, the slow one gets less work:
// batches go to the stream with the fewest in flight.
func TestSlowWorkerGetsLessWork(t *testing.T) {
	var fast, slow atomic.Int64
	var addrs []string
	for _, e := range []counting{{codecsvc.NewLocal(), time.Millisecond, &fast}, {codecsvc.NewLocal(), 10 * time.Millisecond, &slow}} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
		codecsvc.NewServer(e).Register(srv)
		go srv.Serve(lis)
		defer srv.Stop()
		addrs = append(addrs, lis.Addr().String())
	}
	cc, err := rpc.DialWorkers(strings.Join(addrs, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := context.Background()
	s := spec(zstdChain, 64)
	enc, _ := codecsvc.NewLocal().Encode(ctx, s, []codec.Chunk{{Data: floats(64, 1)}})
	// Connect to both workers first (unary calls round-robin over ready
	// ones), so that the streams spread over both.
	ps, _ := codecsvc.SpecToProto(s)
	uc := codecv1.NewCodecServiceClient(cc)
	for i := 0; fast.Load() == 0 || slow.Load() == 0; i++ {
		if i == 200 {
			t.Fatal("never reached both workers")
		}
		uc.Decode(ctx, &codecv1.DecodeRequest{Spec: ps, Encoded: enc})
	}
	fast.Store(0)
	slow.Store(0)
	r := remote.New(cc)
	defer r.Close()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 40 {
				if _, err := r.Decode(ctx, s, enc); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if f, sl := fast.Load(), slow.Load(); f+sl != 320 || f < 2*sl || sl == 0 {
		t.Fatalf("fast worker %d batches, slow worker %d: want the fast one to get well over twice as many, and both some", f, sl)
	}
	t.Logf("fast worker %d batches, slow worker %d", fast.Load(), slow.Load())
}

// A codec worker that shuts down gracefully while batches are in flight on
// every stream costs its callers nothing: no batch fails, gRPC retries
// nothing, the gateway's streams to it are closed once answered (so its
// graceful stop ends well within the grace), and the work goes on on the
// other worker.
func TestWorkerDrainsMidWork(t *testing.T) {
	var nA, nB atomic.Int64
	var srvs []*rpc.Server
	var addrs []string
	for _, n := range []*atomic.Int64{&nA, &nB} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
		cs := codecsvc.NewServer(counting{codecsvc.NewLocal(), 20 * time.Millisecond, n})
		cs.Register(srv)
		srv.OnDrain(func() { cs.Drain() })
		srv.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		go srv.Serve(lis)
		defer srv.Stop()
		srvs = append(srvs, srv)
		addrs = append(addrs, lis.Addr().String())
	}
	var logs syncBuffer
	tier := &rpc.Tier{Name: "codec", Target: strings.Join(addrs, ","), Wait: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	cc, err := rpc.DialWorkers(tier.Target, tier.DialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := context.Background()
	s := spec(zstdChain, 64)
	enc, _ := codecsvc.NewLocal().Encode(ctx, s, []codec.Chunk{{Data: floats(64, 1)}})
	// Both workers ready before the streams open, so that they spread
	// over both (unary calls round-robin over ready workers).
	ps, _ := codecsvc.SpecToProto(s)
	uc := codecv1.NewCodecServiceClient(cc)
	for i := 0; nA.Load() == 0 || nB.Load() == 0; i++ {
		if i == 200 {
			t.Fatal("never reached both workers")
		}
		uc.Decode(ctx, &codecv1.DecodeRequest{Spec: ps, Encoded: enc})
	}
	r := remote.New(cc)
	defer r.Close()

	// Callers keep batches in flight on every stream until told to stop.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := r.Decode(ctx, s, enc); err != nil {
					t.Errorf("a batch failed while a worker drained: %v", err)
					return
				}
				calls.Add(1)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for nA.Load() < 20 || nB.Load() < 20 {
		if time.Now().After(deadline) {
			close(stop)
			wg.Wait()
			t.Fatalf("work never reached both workers (%d, %d)", nA.Load(), nB.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}

	start := time.Now()
	graceful := srvs[0].Shutdown(200*time.Millisecond, 5*time.Second, nil)
	took := time.Since(start)
	afterA, beforeB := nA.Load(), nB.Load()
	// The other worker carries on alone.
	for nB.Load() < beforeB+20 {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the remaining worker got no work after the drain")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if !graceful || took > 2*time.Second {
		t.Errorf("the draining worker stopped after %v, graceful %v: its streams were not closed by the caller", took, graceful)
	}
	if nA.Load() != afterA {
		t.Errorf("the stopped worker ran %d batches after it stopped", nA.Load()-afterA)
	}
	if n := tier.Retries(); n != 0 {
		t.Errorf("gRPC retried %d calls:\n%s", n, logs.String())
	}
	if r.DrainNotices() == 0 {
		t.Error("no stream was told its worker drains")
	}
	t.Logf("drained in %v; %d batches in all, %d streams retired", took.Round(time.Millisecond), calls.Load(), r.DrainNotices())
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestClientIsRemote: the client says its codec work runs on workers, so
// that a gateway does not count it against its own processors' shares.
func TestClientIsRemote(t *testing.T) {
	if !remote.New(nil).Remote() {
		t.Error("the codec workers' client says its work runs in process")
	}
	// Its encoded results alias the messages they came in: not the
	// caller's to recycle.
	if _, ok := any(remote.New(nil)).(interface{ EncodesOwned() bool }); ok {
		t.Error("the codec workers' client says its encoded results are the caller's own")
	}
}
