package remote_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/codecsvc/remote"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/zarr"
)

// sharedClient has r (made by remote.New) offer shared memory of size to
// the worker behind its connection, with its four streams open and their
// offers answered (attached says whether the worker takes them).
func sharedClient(t *testing.T, r *remote.Client, size int64, b *membudget.Budget, attached bool) {
	t.Helper()
	r.SetSharedMemory(size, b)
	s := spec(zstdChain, 8)
	enc, _ := codecsvc.NewLocal().Encode(context.Background(), s, []codec.Chunk{{Data: floats(8, 0)}})
	for range 4 { // a stream per batch, in turn, until the client has 4
		out, err := r.Decode(context.Background(), s, enc)
		if err != nil {
			t.Fatal(err)
		}
		// Released: a batch sent after its stream's offer was answered
		// gets its chunks lent from the segment, which stays mapped (its
		// memory reserved) until they are.
		for _, c := range out {
			c.Release()
		}
	}
	if !attached {
		return
	}
	// The offer is answered asynchronously: wait for it (not a timing
	// assertion, the test's own timeout bounds it).
	for {
		if n, _ := r.SharedStreams(); n == 4 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

type dtCase struct {
	dt     string
	codecs string
	shape  []int64
}

var sharedCases = []dtCase{
	{"float32", zstdChain, []int64{256, 256}},
	{"uint8", `[{"name":"bytes"},{"name":"gzip","configuration":{"level":1}}]`, []int64{100, 70}},
	{"int16", `[{"name":"bytes","configuration":{"endian":"big"}}]`, []int64{33, 17, 5}},
	{"int32", `[{"name":"bytes","configuration":{"endian":"big"}},{"name":"zstd","configuration":{"level":1}}]`, []int64{50, 30}},
	{"float64", `[{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]`, []int64{64, 48}},
	{"complex64", `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"blosc","configuration":{"cname":"lz4","clevel":5,"shuffle":"shuffle","typesize":8,"blocksize":0}}]`, []int64{40, 40}},
}

// chunksOf makes n chunks of c's type with varied bytes.
func chunksOf(c dtCase, n int) (*codec.BatchSpec, []codec.Chunk) {
	dt := zarr.MustDataType(c.dt)
	s := &codec.BatchSpec{Shape: c.shape, DataType: dt, FillValue: make([]byte, dt.Size)}
	var cs []zarr.CodecSpec
	if err := jsonUnmarshal(c.codecs, &cs); err != nil {
		panic(err)
	}
	s.Codecs = cs
	size := dt.Size
	for _, d := range c.shape {
		size *= int(d)
	}
	out := make([]codec.Chunk, n)
	for i := range out {
		f := floats((size+3)/4, float64(i)*1.7)
		out[i] = codec.Chunk{Data: f[:size]}
	}
	return s, out
}

// Decoding through shared memory gives the bytes the socket path gives,
// for whole chunks and selections of several data types and codecs, and
// the chunks really came through the segment; a chunk held is never
// overwritten by later batches.
func TestSharedMemoryMatchesBytes(t *testing.T) {
	ctx := context.Background()
	for _, network := range []string{"tcp", "unix"} {
		cc := serveWorkerOn(t, network)
		plain := remote.New(cc)
		defer plain.Close()
		shared := remote.New(cc)
		defer shared.Close()
		sharedClient(t, shared, 8<<20, nil, true)
		var held []codec.Chunk
		var heldWant [][]byte
		for _, c := range sharedCases {
			t.Run(fmt.Sprintf("%s/%s", network, c.dt), func(t *testing.T) {
				s, chunks := chunksOf(c, 6)
				enc, err := codecsvc.NewLocal().Encode(ctx, s, chunks)
				if err != nil {
					t.Fatal(err)
				}
				_, before := shared.SharedStreams()
				want, err := plain.Decode(ctx, s, enc)
				if err != nil {
					t.Fatal(err)
				}
				got, err := shared.Decode(ctx, s, enc)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if !bytes.Equal(got[i].Data, want[i].Data) || !bytes.Equal(got[i].Data, chunks[i].Data) {
						t.Fatalf("chunk %d differs", i)
					}
				}
				if _, after := shared.SharedStreams(); after < before+uint64(len(enc)) {
					t.Fatalf("%d chunks of %d came through shared memory", after-before, len(enc))
				}
				held, heldWant = append(held, got[0]), append(heldWant, bytes.Clone(want[0].Data))
				for _, ch := range got[1:] {
					ch.Release()
				}
				// Selections: a strided box of each chunk but the last,
				// which is whole.
				sel := make([]codec.Selection, len(enc))
				for i := range sel[:len(sel)-1] {
					for d, n := range c.shape {
						st := int64(i+d) % n
						sel[i].Start = append(sel[i].Start, st)
						sel[i].Step = append(sel[i].Step, int64(1+d))
						sel[i].Count = append(sel[i].Count, (n-st+int64(d))/int64(1+d))
					}
				}
				_, before = shared.SharedStreams()
				want, err = plain.DecodeSelected(ctx, s, enc, sel)
				if err != nil {
					t.Fatal(err)
				}
				got, err = shared.DecodeSelected(ctx, s, enc, sel)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if !bytes.Equal(got[i].Data, want[i].Data) {
						t.Fatalf("selection %d differs", i)
					}
					got[i].Release()
				}
				if _, after := shared.SharedStreams(); after < before+uint64(len(enc)) {
					t.Fatalf("%d selections of %d came through shared memory", after-before, len(enc))
				}
				// A corrupt chunk fails the batch as without shared
				// memory: DataLoss naming it.
				bad := slices.Clone(enc)
				bad[2] = slices.Clone(bad[2])
				bad[2][len(bad[2])/2] ^= 0xff
				bad[2] = bad[2][:len(bad[2])-3]
				_, werr := plain.Decode(ctx, s, bad)
				_, gerr := shared.Decode(ctx, s, bad)
				var ie *codec.ItemError
				if !errors.As(gerr, &ie) || ie.Index != 2 || errs.CodeOf(gerr) != errs.CodeOf(werr) {
					t.Fatalf("corrupt chunk 2: %v, without shared memory %v", gerr, werr)
				}
			})
		}
		for i, h := range held {
			if !bytes.Equal(h.Data, heldWant[i]) {
				t.Fatalf("held chunk %d was overwritten", i)
			}
			h.Release()
		}
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// blocking is a codec engine that decodes batches of chunks of shape [13]
// only when its caller gives up: it marks that one started (creating the
// file started, if set, or closing began) and waits for its context.
type blocking struct {
	codec.Engine
	started string
	began   chan struct{}
}

func (b blocking) Decode(ctx context.Context, s *codec.BatchSpec, e [][]byte) ([]codec.Chunk, error) {
	if len(s.Shape) == 1 && s.Shape[0] == 13 {
		if b.started != "" {
			os.WriteFile(b.started, nil, 0o600)
		}
		if b.began != nil {
			close(b.began)
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return b.Engine.Decode(ctx, s, e)
}

// workerEnv names the unix socket a re-executed test binary serves a
// codec worker on (TestMain).
const workerEnv = "ZARRGATE_TEST_CODEC_WORKER"

func TestMain(m *testing.M) {
	if sock := os.Getenv(workerEnv); sock != "" {
		lis, err := net.Listen("unix", sock)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
		codecsvc.NewServer(blocking{Engine: codecsvc.NewLocal(), started: sock + ".started"}).Register(srv)
		srv.Serve(lis)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// killableShared starts a codec worker process on a unix socket (sock)
// and returns it and a client whose four streams took segments of 4 MiB,
// reserved against b.
func killableShared(t *testing.T) (worker *exec.Cmd, sock string, r *remote.Client, b *membudget.Budget) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "w.sock")
	worker = startWorkerProcess(t, sock)
	cc, err := rpc.Dial("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	b = membudget.New(1<<30, 0)
	r = remote.New(cc)
	t.Cleanup(func() { r.Close() })
	sharedClient(t, r, 4<<20, b, true)
	return worker, sock, r, b
}

// startWorkerProcess runs this test binary as a codec worker on a unix
// socket at sock, waits for it to listen, and returns it.
func startWorkerProcess(t *testing.T, sock string) *exec.Cmd {
	t.Helper()
	os.Remove(sock)
	os.Remove(sock + ".started")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), workerEnv+"="+sock)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// The socket's file appears when it is bound, before it listens: a
	// connection is refused until then.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			return cmd
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker process does not listen on %s: %v", sock, err)
		}
	}
}

// waitFor polls cond until it holds (the test's timeout bounds it).
func waitFor(cond func() bool) {
	for !cond() {
		time.Sleep(2 * time.Millisecond)
	}
}

// A codec worker process SIGKILLed while it works on a batch whose
// chunks are in shared memory: the batch fails with UNAVAILABLE and
// delivers nothing, every segment of the dead streams is abandoned (its
// memory back in the budget), and once a worker is back the next streams
// get new segments and decode through them.
func TestSharedMemoryWorkerKilledMidBatch(t *testing.T) {
	ctx := context.Background()
	worker, sock, r, b := killableShared(t)
	if b.InUse() != 4*(4<<20) {
		t.Fatalf("4 segments of 4 MiB: %d bytes reserved", b.InUse())
	}
	block := spec(zstdChain, 13)
	enc, _ := codecsvc.NewLocal().Encode(ctx, block, []codec.Chunk{{Data: floats(13, 1)}})
	type result struct {
		out []codec.Chunk
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := r.Decode(ctx, block, enc)
		done <- result{out, err}
	}()
	waitFor(func() bool { _, err := os.Stat(sock + ".started"); return err == nil })
	worker.Process.Kill()
	res := <-done
	if errs.CodeOf(res.err) != errs.CodeUnavailable || res.out != nil {
		t.Fatalf("batch of a killed worker: %v (%d chunks), want UNAVAILABLE and nothing", res.err, len(res.out))
	}
	waitFor(func() bool { return b.InUse() == 0 })

	worker.Wait()
	startWorkerProcess(t, sock)
	s := spec(zstdChain, 128, 128)
	want := floats(128*128, 3)
	enc, _ = codecsvc.NewLocal().Encode(ctx, s, []codec.Chunk{{Data: want}})
	// The connection reconnects; streams opened since get new segments.
	var attachedBefore uint64
	attachedBefore, _ = r.SharedStreams()
	for {
		_, chunksBefore := r.SharedStreams()
		out, err := r.Decode(ctx, s, enc)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !bytes.Equal(out[0].Data, want) {
			t.Fatal("decoded wrong after the worker came back")
		}
		out[0].Release()
		if a, c := r.SharedStreams(); a > attachedBefore && c > chunksBefore {
			break
		}
	}
}

// A batch whose caller gives up while the worker works on it does not
// stop the stream's other batches; a stream closed with that batch still
// out abandons its segment, whose memory goes back to the budget once the
// chunks lent from it are released; a held chunk keeps its bytes.
func TestSharedMemoryCancelledAndClosed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	lis, err := net.Listen("unix", filepath.Join(dir, "w.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	began := make(chan struct{})
	codecsvc.NewServer(blocking{Engine: codecsvc.NewLocal(), began: began}).Register(srv)
	go srv.Serve(lis)
	defer srv.Stop()
	cc, err := rpc.Dial("unix://" + lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	b := membudget.New(1<<30, 0)
	r := remote.New(cc)
	sharedClient(t, r, 4<<20, b, true)

	s := spec(zstdChain, 256, 256)
	want := floats(256*256, 5)
	enc, _ := codecsvc.NewLocal().Encode(ctx, s, []codec.Chunk{{Data: want}})
	held, err := r.Decode(ctx, s, enc)
	if err != nil || !bytes.Equal(held[0].Data, want) {
		t.Fatalf("decode: %v", err)
	}
	if _, c := r.SharedStreams(); c == 0 {
		t.Fatal("the chunk did not come through shared memory")
	}
	block := spec(zstdChain, 13)
	benc, _ := codecsvc.NewLocal().Encode(ctx, block, []codec.Chunk{{Data: floats(13, 1)}})
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := r.Decode(cctx, block, benc)
		done <- err
	}()
	<-began
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled batch: %v", err)
	}
	// More batches while the cancelled one may still be answered.
	for range 8 {
		out, err := r.Decode(ctx, s, enc)
		if err != nil || !bytes.Equal(out[0].Data, want) {
			t.Fatalf("after a cancel: %v", err)
		}
		out[0].Release()
	}
	r.Close()
	// Every segment but the held chunk's is gone; that one stays until
	// the chunk is released, its bytes intact.
	waitFor(func() bool { return b.InUse() == 4<<20 })
	if !bytes.Equal(held[0].Data, want) {
		t.Fatal("a held chunk changed after its stream closed")
	}
	held[0].Release()
	// The segment goes once its last chunk is released and its stream
	// has ended, whichever comes last: the stream's end, after Close, may
	// still be under way.
	waitFor(func() bool { return b.InUse() == 0 })
}

// A worker that declines the offer (shared memory off) gets bytes; the
// segment's memory goes back to the budget.
func TestSharedMemoryWorkerSaysNo(t *testing.T) {
	ctx := context.Background()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	cs := codecsvc.NewServer(codecsvc.NewLocal())
	cs.SetSharedMemory(false)
	cs.Register(srv)
	go srv.Serve(lis)
	defer srv.Stop()
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	b := membudget.New(1<<30, 0)
	r := remote.New(cc)
	defer r.Close()
	sharedClient(t, r, 4<<20, b, false)
	s := spec(zstdChain, 256, 256)
	want := floats(256*256, 5)
	enc, _ := codecsvc.NewLocal().Encode(ctx, s, []codec.Chunk{{Data: want}})
	// Once the offers are answered, nothing is reserved, and batches
	// decode as bytes.
	waitFor(func() bool { return b.InUse() == 0 })
	for range 8 {
		out, err := r.Decode(ctx, s, enc)
		if err != nil || !bytes.Equal(out[0].Data, want) {
			t.Fatalf("decode: %v", err)
		}
		out[0].Release()
	}
	if a, c := r.SharedStreams(); a != 0 || c != 0 {
		t.Fatalf("%d streams, %d chunks through shared memory of a worker that declined", a, c)
	}
}

// A segment too small for a batch: the chunks that get no region (and
// the encoded chunks, which do not fit) go on the stream, the others
// through the segment, and the batch decodes whole and right.
func TestSharedMemoryRingFull(t *testing.T) {
	ctx := context.Background()
	cc := serveWorkerOn(t, "unix")
	r := remote.New(cc)
	defer r.Close()
	sharedClient(t, r, 1<<20, nil, true)
	for _, c := range sharedCases[:1] { // float32: 16 chunks of 256 KiB
		s, chunks := chunksOf(c, 16)
		enc, err := codecsvc.NewLocal().Encode(ctx, s, chunks)
		if err != nil {
			t.Fatal(err)
		}
		for round := range 3 {
			_, before := r.SharedStreams()
			out, err := r.Decode(ctx, s, enc)
			if err != nil {
				t.Fatalf("%s round %d: %v", c.dt, round, err)
			}
			for i := range out {
				if !bytes.Equal(out[i].Data, chunks[i].Data) {
					t.Fatalf("%s round %d: chunk %d differs", c.dt, round, i)
				}
				out[i].Release()
			}
			if _, after := r.SharedStreams(); after == before || after-before == uint64(len(enc)) {
				t.Fatalf("%s: %d of %d chunks through a 1 MiB segment, want some but not all", c.dt, after-before, len(enc))
			}
		}
	}
}

// A batch given regions of a stream's segment whose worker turns out to
// be draining before the batch is sent goes to another stream, and the
// regions it was given are freed: the draining stream's ring has all its
// space back (it would otherwise hold them until the stream ends).
func TestSharedMemoryDrainingStreamFreesRegions(t *testing.T) {
	ctx := context.Background()
	cc := serveWorkerOn(t, "unix")
	r := remote.New(cc)
	defer r.Close()
	sharedClient(t, r, 4<<20, nil, true)
	spaceBack, restore := remote.DrainAfterPlace()
	defer restore()
	s := spec(zstdChain, 256, 256)
	want := floats(256*256, 9)
	enc, _ := codecsvc.NewLocal().Encode(ctx, s, []codec.Chunk{{Data: want}})
	out, err := r.Decode(ctx, s, enc)
	if err != nil || !bytes.Equal(out[0].Data, want) {
		t.Fatalf("decode after its stream turned draining: %v", err)
	}
	out[0].Release()
	if !spaceBack() {
		t.Fatal("the draining stream's segment keeps the regions of a batch never sent on it")
	}
}

// Encoded chunks read straight into room Stage lent (as the gateway does
// from a store in its process) go to the worker where they are, decode to
// the bytes they hold, and their room comes back once released and
// answered: many more batches than the segment holds at once run through
// it. A chunk staged but sent with one that was not is fine too, as is a
// batch mixing chunks staged on two streams.
func TestStagedChunksGoInPlace(t *testing.T) {
	ctx := context.Background()
	for _, network := range []string{"tcp", "unix"} {
		cc := serveWorkerOn(t, network)
		r := remote.New(cc)
		defer r.Close()
		sharedClient(t, r, 8<<20, nil, true)
		s := spec(zstdChain, 256, 256)
		const n = 4
		want := make([][]byte, n)
		enc := make([][]byte, n)
		for i := range want {
			want[i] = floats(256*256, float64(i)+0.5)
			e, err := codecsvc.NewLocal().Encode(ctx, s, []codec.Chunk{{Data: want[i]}})
			if err != nil {
				t.Fatal(err)
			}
			enc[i] = e[0]
		}
		for round := range 40 { // 40 × 4 × (encoded + 256 KiB out) ≫ 8 MiB
			before := r.StagedChunks()
			batch := make([][]byte, n)
			var releases []func()
			sizes := make([]int64, n)
			for i, e := range enc {
				sizes[i] = int64(len(e))
			}
			bufs, rels := r.Stage(sizes)
			for i, e := range enc {
				var buf []byte
				var release func()
				if bufs != nil {
					buf, release = bufs[i], rels[i]
				}
				if buf == nil || (round%5 == 4 && i == 0) {
					if release != nil {
						release()
					}
					batch[i] = e // not staged: copied as before
					continue
				}
				copy(buf, e)
				batch[i] = buf
				releases = append(releases, release)
			}
			out, err := r.Decode(ctx, s, batch)
			for _, rel := range releases {
				rel()
			}
			if err != nil {
				t.Fatalf("%s round %d: %v", network, round, err)
			}
			for i := range out {
				if !bytes.Equal(out[i].Data, want[i]) {
					t.Fatalf("%s round %d: chunk %d differs", network, round, i)
				}
				out[i].Release()
			}
			if got := r.StagedChunks() - before; got != uint64(len(releases)) || got == 0 {
				t.Fatalf("%s round %d: %d chunks sent in place, %d staged", network, round, got, len(releases))
			}
		}
	}
}

// A batch of staged chunks whose worker is SIGKILLed while it works on
// it fails with UNAVAILABLE; its staged room is never freed for reuse
// (the worker may have been reading it), but once its caller released it
// the dead stream's segment goes, its memory back in the budget.
func TestStagedChunksWorkerKilled(t *testing.T) {
	ctx := context.Background()
	worker, sock, r, b := killableShared(t)
	block := spec(zstdChain, 13)
	enc, _ := codecsvc.NewLocal().Encode(ctx, block, []codec.Chunk{{Data: floats(13, 1)}})
	bufs, rels := r.Stage([]int64{int64(len(enc[0]))})
	if bufs == nil || bufs[0] == nil {
		t.Fatal("no room staged")
	}
	copy(bufs[0], enc[0])
	done := make(chan error, 1)
	go func() {
		_, err := r.Decode(ctx, block, [][]byte{bufs[0]})
		done <- err
	}()
	waitFor(func() bool { _, err := os.Stat(sock + ".started"); return err == nil })
	if r.StagedChunks() != 1 {
		t.Fatalf("%d chunks sent in place, want 1", r.StagedChunks())
	}
	worker.Process.Kill()
	if err := <-done; errs.CodeOf(err) != errs.CodeUnavailable {
		t.Fatalf("batch of a killed worker: %v, want UNAVAILABLE", err)
	}
	rels[0]()
	waitFor(func() bool { return b.InUse() == 0 })
}
