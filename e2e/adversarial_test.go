package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/zarrgate/zarrgate/codecsvc"
	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"
	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"
	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"
	"github.com/zarrgate/zarrgate/internal/shm"
	"github.com/zarrgate/zarrgate/zarr"
)

// The adversarial suite (issue 12): one hostile or careless request per
// case against a fresh `zarrgate serve --memory-limit 256MiB` (or
// codec-worker), sent with a client built from the protos alone, so that
// it can send what the Go client refuses to. For each case: the status
// code (never Internal or Unknown), the time, the server's peak RSS, and
// the server still serving afterwards.

// Bounds of every case unless it says otherwise. The budget is 256 MiB;
// twice that leaves room for the runtime, gRPC's buffers and the binary
// (19 MiB idle) while still catching an allocation the budget did not see.
const (
	advBudget  = "256MiB"
	advMaxRSS  = 512 * MiB
	advMaxTime = 10 * time.Second
	// advLean bounds cases that must be refused from arithmetic alone,
	// before anything proportional to the request is allocated: the idle
	// server plus 100 MiB of slack.
	advLean = 128 * MiB
	// advKillAt: a server past this is killed by the watch, so that one
	// broken case fails instead of taking the shared machine's memory.
	advKillAt = 1536 * MiB
	// advDeadline bounds the calls that set a case up.
	advDeadline = 30 * time.Second
)

// advEnv is what a case talks to.
type advEnv struct {
	srv    *server
	cc     *grpc.ClientConn
	arrays gatewayv1.ArrayServiceClient
	store  storev1.StoreServiceClient
	codec  codecv1.CodecServiceClient
}

type advCase struct {
	name string
	// worker: run against `zarrgate codec-worker` instead of serve.
	worker bool
	want   []codes.Code
	// msg, if set: the error message must contain it (case-insensitive).
	msg   string
	setup func(t *testing.T, e *advEnv)
	run   func(ctx context.Context, e *advEnv) error
	// Bounds; zero means the defaults above.
	maxTime time.Duration
	maxRSS  int64
	// maxCPU, if set, bounds the server's CPU time during the call and
	// (a spin that outlives the call) in the second after it.
	maxCPU time.Duration
}

// advRow is one line of the suite's table.
type advRow struct {
	name, code string
	elapsed    time.Duration
	peak       int64
}

func TestAdversarial(t *testing.T) {
	var (
		mu   sync.Mutex
		rows []advRow
	)
	t.Cleanup(func() {
		var b strings.Builder
		fmt.Fprintf(&b, "\n| case | code | time | peak RSS |\n| --- | --- | --- | --- |\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.name, r.code, fmtDur(r.elapsed), mib(r.peak))
		}
		t.Log(b.String())
	})
	for _, c := range adversarialCases() {
		t.Run(c.name, func(t *testing.T) {
			// A case that stops early (t.Fatal) still gets its line.
			r := advRow{name: c.name, code: "setup failed"}
			defer func() {
				mu.Lock()
				rows = append(rows, r)
				mu.Unlock()
			}()
			runAdvCase(t, c, &r)
		})
	}
}

func fmtDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// createFlat is a case's setup: the uint8 array path of n elements in
// chunks of chunk.
func createFlat(path string, n, chunk uint64) func(t *testing.T, e *advEnv) {
	return func(t *testing.T, e *advEnv) {
		if _, err := e.arrays.CreateArray(context.Background(), &gatewayv1.CreateArrayRequest{Path: path, Shape: []uint64{n}, DataType: "uint8", ChunkShape: []uint64{chunk}}); err != nil {
			t.Fatal(err)
		}
	}
}

// writeSharedPastFile writes all of path from a 4 KiB memory file of the
// test's own, named with its token but claiming 2^64-1 bytes: it must be
// refused (refusedOnly) or fail on the slab's size.
func writeSharedPastFile(path string) func(ctx context.Context, e *advEnv) error {
	return func(ctx context.Context, e *advEnv) error {
		d, err := shm.NewDest(4096)
		if err != nil {
			return err
		}
		defer d.Close()
		return refusedOnly(e.arrays.WriteSlabShared(ctx, &gatewayv1.WriteSlabSharedRequest{Path: path,
			Source: &gatewayv1.SharedDestination{Pid: uint32(d.Pid), Fd: uint32(d.Fd), Size: math.MaxUint64, Token: d.Token}}))
	}
}

// refusedOnly is a WriteSlabShared call's outcome for a case whose memory
// must be refused: its error, or nil for a refusal, or an error for an
// acceptance.
func refusedOnly(resp *gatewayv1.WriteSlabSharedResponse, err error) error {
	if err != nil {
		return err
	}
	if resp.GetSource().GetAccepted() {
		return status.Errorf(codes.Internal, "the gateway took the memory (%d chunks written)", resp.GetChunksWritten())
	}
	if resp.GetSource().GetReason() == "" {
		return status.Error(codes.Internal, "refused without a reason")
	}
	return nil
}

// sharedValuesMsgs sends msgs on a GetPartialValuesShared call (without
// mapping any offered segment), closes its side, and returns how it ended.
func sharedValuesMsgs(ctx context.Context, e *advEnv, msgs ...*storev1.GetPartialValuesSharedRequest) error {
	st, err := e.store.GetPartialValuesShared(ctx)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		st.Send(m)
	}
	st.CloseSend()
	for {
		if _, err := st.Recv(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

func runAdvCase(t *testing.T, c advCase, row *advRow) {
	var srv *server
	if c.worker {
		srv = startCommand(t, "codec-worker", memoryLimit(advBudget)...)
	} else {
		srv = startServer(t, append([]string{"--root", t.TempDir()}, memoryLimit(advBudget)...)...)
	}
	cc, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64*MiB), grpc.MaxCallSendMsgSize(64*MiB)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	e := &advEnv{srv: srv, cc: cc, arrays: gatewayv1.NewArrayServiceClient(cc), store: storev1.NewStoreServiceClient(cc), codec: codecv1.NewCodecServiceClient(cc)}
	if !c.worker {
		ctx, cancel := context.WithTimeout(context.Background(), advDeadline)
		_, err := e.arrays.CreateArray(ctx, &gatewayv1.CreateArrayRequest{Path: "health", Shape: []uint64{16}, DataType: "uint8", ChunkShape: []uint64{16}})
		cancel()
		if err != nil {
			t.Fatalf("creating the health-check array: %v", err)
		}
	}
	if c.setup != nil {
		c.setup(t, e)
	}
	pid := srv.cmd.Process.Pid
	if err := resetPeak(pid); err != nil {
		t.Fatalf("resetting the peak RSS: %v", err)
	}
	watch := watchRSS(pid, 10*time.Millisecond, advKillAt)
	cpu0, _ := cpuTime(pid)
	maxTime, maxRSS := c.maxTime, c.maxRSS
	if maxTime == 0 {
		maxTime = advMaxTime
	}
	if maxRSS == 0 {
		maxRSS = advMaxRSS
	}
	// The deadline is well past the bound, so that a slow answer is
	// measured rather than cut short, and a spin or hang still ends.
	ctx, cancel := context.WithTimeout(context.Background(), 3*maxTime)
	start := time.Now()
	err = c.run(ctx, e)
	row.elapsed = time.Since(start)
	cancel()
	cpu1, _ := cpuTime(pid)
	var cpu2 time.Duration
	if c.maxCPU > 0 {
		time.Sleep(time.Second)
		cpu2, _ = cpuTime(pid)
	}
	peak, killed := watch.finish()
	row.peak = peak
	code := status.Code(err)
	row.code = code.String()
	if _, isStatus := status.FromError(err); !isStatus {
		// The call answered, but not what it should: a check of the case.
		code, row.code = codes.Unknown, "wrong answer"
	}
	if !codeIn(code, c.want) {
		row.code += " (want " + codeList(c.want) + ")"
	}
	t.Logf("code %v in %v, peak RSS %s: %v", code, row.elapsed, mib(peak), err)

	// A connection lost mid-call may be a crash still printing its stacks.
	grace := time.Duration(0)
	if code == codes.Unavailable {
		grace = 2 * time.Second
	}
	if killed {
		row.code += " (killed over " + mib(advKillAt) + ")"
		t.Errorf("the server passed %s of RSS and was killed", mib(advKillAt))
	} else if srv.exited(grace) {
		row.code += " (crashed)"
		t.Errorf("the server died: %s", crashReason(srv.logs.String()))
	}
	if !codeIn(code, c.want) {
		t.Errorf("code %v (%v), want %s", code, err, codeList(c.want))
	}
	if c.msg != "" && code != codes.OK && !strings.Contains(strings.ToLower(status.Convert(err).Message()), strings.ToLower(c.msg)) {
		t.Errorf("message %q does not name %q", status.Convert(err).Message(), c.msg)
	}
	if row.elapsed > maxTime {
		row.code += " (over " + fmtDur(maxTime) + ")"
		t.Errorf("took %v, bound %v", row.elapsed, maxTime)
	}
	if peak > maxRSS && !killed {
		row.code += " (over " + mib(maxRSS) + ")"
		t.Errorf("peak RSS %s, bound %s", mib(peak), mib(maxRSS))
	}
	if c.maxCPU > 0 {
		if d := cpu1 - cpu0; d > c.maxCPU {
			row.code += fmt.Sprintf(" (%.1f s of CPU)", d.Seconds())
			t.Errorf("the server used %v of CPU during the call, bound %v", d, c.maxCPU)
		}
		if d := cpu2 - cpu1; d > 200*time.Millisecond {
			row.code += " (spinning after the call)"
			t.Errorf("the server used %v of CPU in the second after the call: still spinning", d)
		}
	}
	if l := srv.logs.String(); strings.Contains(l, "server bug") {
		t.Errorf("bad input logged as a server bug:\n%s", l)
	}
	if !killed && srv.alive() {
		if err := advHealthy(e, c.worker); err != nil {
			t.Errorf("the server no longer serves: %v", err)
		}
	}
}

// advHealthy checks that the server still serves: a small ReadSlab (serve)
// or a small Decode (codec-worker).
func advHealthy(e *advEnv, worker bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if worker {
		spec := &codecv1.ChunkSpec{DataType: "uint8", ChunkShape: []uint64{4}, CodecsJson: `[{"name":"bytes"}]`}
		resp, err := e.codec.Decode(ctx, &codecv1.DecodeRequest{Spec: spec, Encoded: [][]byte{{1, 2, 3, 4}}})
		if err != nil {
			return err
		}
		if len(resp.GetChunks()) != 1 || !bytes.Equal(resp.GetChunks()[0].GetData(), []byte{1, 2, 3, 4}) {
			return fmt.Errorf("decode returned %v", resp.GetChunks())
		}
		return nil
	}
	n, err := drainSlab(ctx, e.arrays, "health", nil, func(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) })
	if err != nil {
		return err
	}
	if n != 16 {
		return fmt.Errorf("read %d bytes of 16", n)
	}
	return nil
}

func codeIn(c codes.Code, want []codes.Code) bool {
	for _, w := range want {
		if c == w {
			return true
		}
	}
	return false
}

func codeList(cs []codes.Code) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = c.String()
	}
	return strings.Join(s, " or ")
}

// crashReason picks the line of a server's log that says why it died.
func crashReason(log string) string {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "fatal error") || strings.HasPrefix(l, "panic:") || strings.Contains(l, "signal: killed") {
			return l
		}
	}
	return lines[len(lines)-1]
}

// drainSlab reads a slab with ReadSlab, keeping nothing: it returns the
// number of data bytes received and fails if check (if any) rejects a
// block's data.
func drainSlab(ctx context.Context, arrays gatewayv1.ArrayServiceClient, path string, sel []*gatewayv1.Slice, check func([]byte) bool) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := arrays.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: path, Selection: sel})
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if b := m.GetBlock(); b != nil {
			if check != nil && !check(b.GetData()) {
				return n, fmt.Errorf("block at %v: unexpected data", b.GetOrigin())
			}
			n += int64(len(b.GetData()))
		}
	}
}

func all(stop ...uint64) []*gatewayv1.Slice {
	s := make([]*gatewayv1.Slice, len(stop))
	for i, v := range stop {
		s[i] = &gatewayv1.Slice{Start: 0, Stop: v, Step: 1}
	}
	return s
}

// put stores a value with StoreService.Set, in 1 MiB messages.
func put(t *testing.T, e *advEnv, key string, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), advDeadline)
	defer cancel()
	st, err := e.store.Set(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&storev1.SetRequest{Header: &storev1.SetHeader{Key: key}}); err != nil {
		t.Fatal(err)
	}
	for len(data) > 0 {
		n := min(len(data), MiB)
		if err := st.Send(&storev1.SetRequest{Data: data[:n]}); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
	}
	if _, err := st.CloseAndRecv(); err != nil {
		t.Fatalf("Set %s: %v", key, err)
	}
}

func get(t *testing.T, e *advEnv, key string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), advDeadline)
	defer cancel()
	st, err := e.store.Get(ctx, &storev1.GetRequest{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("Get %s: %v", key, err)
		}
		out = append(out, m.GetData()...)
	}
}

func mkArray(t *testing.T, e *advEnv, req *gatewayv1.CreateArrayRequest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), advDeadline)
	defer cancel()
	if _, err := e.arrays.CreateArray(ctx, req); err != nil {
		t.Fatalf("CreateArray %s: %v", req.GetPath(), err)
	}
}

// v3Meta is a v3 zarr.json of a regular-grid array.
func v3Meta(shape, chunks []uint64, dtype, codecs string) []byte {
	fill := "0"
	if dtype == "string" {
		fill = `""`
	}
	return fmt.Appendf(nil, `{"zarr_format":3,"node_type":"array","shape":%s,"data_type":%q,"chunk_grid":{"name":"regular","configuration":{"chunk_shape":%s}},"chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},"fill_value":%s,"codecs":%s}`,
		jsonOf(shape), dtype, jsonOf(chunks), fill, codecs)
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Codec chains of the bombs.
const (
	bytesLE   = `{"name":"bytes","configuration":{"endian":"little"}}`
	zstdChain = `[` + bytesLE + `,{"name":"zstd","configuration":{"level":3,"checksum":false}}]`
	gzipChain = `[` + bytesLE + `,{"name":"gzip","configuration":{"level":1}}]`
)

// repeatReader yields n copies of one byte.
type repeatReader struct {
	n int64
	c byte
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := int(min(int64(len(p)), r.n))
	for i := range p[:k] {
		p[i] = r.c
	}
	r.n -= int64(k)
	return k, nil
}

// zstdFrame builds a zstd frame block by block: raw blocks carry bytes as
// they are, RLE blocks one byte repeated up to 128 KiB, so 1 GiB of one
// byte costs 32 KiB. No content size in the header, a 128 KiB window.
type zstdFrame struct{ b []byte }

func newZstdFrame() *zstdFrame {
	// Magic; frame header descriptor 0 (window descriptor follows, no
	// content size, no checksum, no dictionary); window 2^(10+7) bytes.
	return &zstdFrame{b: []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 7 << 3}}
}

func (z *zstdFrame) block(typ int, size int, last bool) {
	h := uint32(typ)<<1 | uint32(size)<<3
	if last {
		h |= 1
	}
	z.b = append(z.b, byte(h), byte(h>>8), byte(h>>16))
}

func (z *zstdFrame) raw(p []byte) *zstdFrame {
	z.block(0, len(p), false)
	z.b = append(z.b, p...)
	return z
}

func (z *zstdFrame) rle(c byte, n int64) *zstdFrame {
	for n > 0 {
		k := min(n, 128<<10)
		z.block(1, int(k), false)
		z.b = append(z.b, c)
		n -= k
	}
	return z
}

func (z *zstdFrame) finish() []byte {
	z.block(0, 0, true)
	return z.b
}

// zstdClaiming is a 17-byte zstd frame whose header claims size bytes of
// content and which holds none.
func zstdClaiming(size uint64) []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0} // magic; FHD: 8-byte content size, single segment
	b = binary.LittleEndian.AppendUint64(b, size)
	return append(b, 0x01, 0x00, 0x00) // a raw, last block of 0 bytes
}

// The string bombs: 16 strings of 64 MiB (1 GiB) as vlen-utf8 writes them
// (a count, then each length and its bytes), compressed.
const (
	strBombN   = 16
	strBombLen = 64 << 20
)

var (
	// 1 GiB of 'a's under 16 strings, gzip: about 1 MiB.
	stringGzipBomb = sync.OnceValue(func() []byte {
		var buf bytes.Buffer
		w, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		w.Write(binary.LittleEndian.AppendUint32(nil, strBombN))
		for range strBombN {
			w.Write(binary.LittleEndian.AppendUint32(nil, strBombLen))
			io.CopyBuffer(w, &repeatReader{n: strBombLen, c: 'a'}, make([]byte, MiB))
		}
		w.Close()
		return buf.Bytes()
	})
	// The same in zstd RLE blocks: 32 KiB.
	stringZstdBomb = sync.OnceValue(func() []byte {
		z := newZstdFrame().raw(binary.LittleEndian.AppendUint32(nil, strBombN))
		for range strBombN {
			z.raw(binary.LittleEndian.AppendUint32(nil, strBombLen)).rle('a', strBombLen)
		}
		return z.finish()
	})
	// 256 MiB of zeros, gzip level 1: about 260 KiB.
	gzipBomb = sync.OnceValue(func() []byte {
		var buf bytes.Buffer
		w, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		io.CopyBuffer(w, &repeatReader{n: 256 << 20}, make([]byte, MiB))
		w.Close()
		return buf.Bytes()
	})
)

// encodeBomb encodes 256 MiB of zeros with a chain (a v3 codecs array
// whose first codec is bytes) the way an honest writer of a 256 MiB uint8
// chunk would: what a 4 KiB chunk must refuse to decode. A decoder that
// trusted its input would pass the case's RSS bound (advLean) before
// noticing the size.
func encodeBomb(t *testing.T, chain string) []byte {
	t.Helper()
	var specs []zarr.CodecSpec
	if err := json.Unmarshal([]byte(chain), &specs); err != nil {
		t.Fatal(err)
	}
	c, err := codecsvc.NewChain(specs, codecsvc.ChunkSpec{Shape: []int{256 << 20}, DataType: zarr.MustDataType("uint8")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Encode(codecsvc.Chunk{Data: make([]byte, 256<<20)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bombCase reads a 4 KiB uint8 array whose one chunk holds a bomb
// encoded with chain (bytes(chain) to encode it when bomb is nil).
func bombCase(name, chain string, bomb func() []byte) advCase {
	return advCase{
		name: "bomb: " + name,
		want: []codes.Code{codes.DataLoss},
		setup: func(t *testing.T, e *advEnv) {
			put(t, e, "b/zarr.json", v3Meta([]uint64{4096}, []uint64{4096}, "uint8", chain))
			var b []byte
			if bomb != nil {
				b = bomb()
			} else {
				b = encodeBomb(t, chain)
			}
			put(t, e, "b/c/0", b)
		},
		run: func(ctx context.Context, e *advEnv) error {
			_, err := drainSlab(ctx, e.arrays, "b", nil, nil)
			return err
		},
		maxRSS: advLean,
	}
}

// stringBombCase reads a string array of 16 elements whose one chunk is a
// string bomb; readers of them read it at once. DataLoss (the chunk is over
// the per-chunk limit of variable-length data) or ResourceExhausted (it
// would be, and the budget cannot hold it) are both a refusal before the
// gigabyte is paid.
func stringBombCase(name, chain string, bomb func() []byte, readers int) advCase {
	return advCase{
		name: name,
		want: []codes.Code{codes.DataLoss, codes.ResourceExhausted},
		setup: func(t *testing.T, e *advEnv) {
			put(t, e, "s/zarr.json", v3Meta([]uint64{strBombN}, []uint64{strBombN}, "string", chain))
			put(t, e, "s/c/0", bomb())
		},
		run: func(ctx context.Context, e *advEnv) error {
			errc := make(chan error, readers)
			for range readers {
				go func() {
					_, err := drainSlab(ctx, e.arrays, "s", nil, nil)
					errc <- err
				}()
			}
			return sameErr(errc, readers)
		},
	}
}

// sameErr collects n errors and returns the first whose code differs from
// the first one's, or the first one.
func sameErr(errc chan error, n int) error {
	var first error
	for i := range n {
		err := <-errc
		if i == 0 {
			first = err
		} else if status.Code(err) != status.Code(first) {
			return fmt.Errorf("concurrent calls disagree: %v and %w", first, err)
		}
	}
	return first
}

// shardCase writes a 32×32 float32 array as one shard of 16 inner 8×8
// chunks, then lets lie rewrite the shard's bytes (its index at the end:
// 16 × (offset, nbytes) and a CRC32C, which lie recomputes) and reads it.
func shardCase(name string, lie func(shard []byte, idx []uint64) []byte) advCase {
	return advCase{
		name: "shard index: " + name,
		want: []codes.Code{codes.DataLoss},
		msg:  "c/0/0",
		setup: func(t *testing.T, e *advEnv) {
			mkArray(t, e, &gatewayv1.CreateArrayRequest{Path: "s", Shape: []uint64{32, 32}, DataType: "float32", ChunkShape: []uint64{8, 8}, ShardShape: []uint64{32, 32}})
			vals := make([]byte, 32*32*4)
			for i := range 32 * 32 {
				binary.LittleEndian.PutUint32(vals[4*i:], math.Float32bits(float32(i)+0.5))
			}
			if err := writeSlab(context.Background(), e, "s", all(32, 32), &gatewayv1.Block{Origin: []uint64{0, 0}, Shape: []uint64{32, 32}, Data: vals}); err != nil {
				t.Fatal(err)
			}
			shard := get(t, e, "s/c/0/0")
			const n = 16
			if len(shard) < n*16+4 {
				t.Fatalf("shard of %d bytes", len(shard))
			}
			body := shard[:len(shard)-n*16-4]
			idx := make([]uint64, 2*n)
			for i := range idx {
				idx[i] = binary.LittleEndian.Uint64(shard[len(body)+8*i:])
			}
			if idx[0] == math.MaxUint64 {
				t.Fatal("the shard's first chunk is missing")
			}
			put(t, e, "s/c/0/0", lie(body, idx))
		},
		run: func(ctx context.Context, e *advEnv) error {
			_, err := drainSlab(ctx, e.arrays, "s", nil, nil)
			return err
		},
		maxTime: 2 * time.Second,
		maxCPU:  time.Second,
	}
}

// shardWith appends an index (and its CRC32C) to a shard body.
func shardWith(body []byte, idx []uint64) []byte {
	out := append([]byte(nil), body...)
	start := len(out)
	for _, v := range idx {
		out = binary.LittleEndian.AppendUint64(out, v)
	}
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out[start:], crc32.MakeTable(crc32.Castagnoli)))
}

// writeSlab sends a WriteSlab stream: a header, then the blocks.
func writeSlab(ctx context.Context, e *advEnv, path string, sel []*gatewayv1.Slice, blocks ...*gatewayv1.Block) error {
	msgs := []*gatewayv1.WriteSlabRequest{{Message: &gatewayv1.WriteSlabRequest_Header{Header: &gatewayv1.WriteSlabHeader{Path: path, Selection: sel}}}}
	for _, b := range blocks {
		msgs = append(msgs, &gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Block{Block: b}})
	}
	return writeSlabMsgs(ctx, e, msgs...)
}

// writeSlabMsgs sends exactly msgs on a WriteSlab stream and returns the
// call's status.
func writeSlabMsgs(ctx context.Context, e *advEnv, msgs ...*gatewayv1.WriteSlabRequest) error {
	st, err := e.arrays.WriteSlab(ctx)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if err := st.Send(m); err != nil {
			break // the server ended the call; CloseAndRecv has its status
		}
	}
	_, err = st.CloseAndRecv()
	return err
}

func setMsgs(ctx context.Context, e *advEnv, msgs ...*storev1.SetRequest) error {
	st, err := e.store.Set(ctx)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if err := st.Send(m); err != nil {
			break
		}
	}
	_, err = st.CloseAndRecv()
	return err
}

// rawCodec sends and receives messages as bytes encoded by hand: the
// generated code refuses to marshal strings that are not UTF-8.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// rawCall makes a call with a hand-encoded request whose field 1 (key or
// path, a string in the protos) holds s, and returns its status.
func rawCall(ctx context.Context, e *advEnv, method string, serverStream, clientStream bool, s string) error {
	req := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte(s))
	if clientStream { // Set: the key is in the header, field 1 of field 1
		req = protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), req)
	}
	return rawSend(ctx, e, method, serverStream, clientStream, req)
}

// rawSend sends req, bytes encoded by hand, as the one request of a call.
func rawSend(ctx context.Context, e *advEnv, method string, serverStream, clientStream bool, req []byte) error {
	st, err := e.cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: serverStream, ClientStreams: clientStream}, method, grpc.ForceCodec(rawCodec{}))
	if err != nil {
		return err
	}
	if err := st.SendMsg(&req); err != nil && err != io.EOF {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	for {
		var resp []byte
		if err := st.RecvMsg(&resp); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

func ones(n int) []uint64 {
	s := make([]uint64, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

func stringBlock(origin, shape []uint64, strs ...string) *gatewayv1.Block {
	b := &gatewayv1.Block{Origin: origin, Shape: shape, Offsets: []uint64{0}}
	for _, s := range strs {
		b.Data = append(b.Data, s...)
		b.Offsets = append(b.Offsets, uint64(len(b.Data)))
	}
	return b
}

func adversarialCases() []advCase {
	inv := []codes.Code{codes.InvalidArgument}
	tooBig := []codes.Code{codes.ResourceExhausted, codes.InvalidArgument}
	exhausted := []codes.Code{codes.ResourceExhausted}
	create := func(shape, chunks []uint64, dtype string) func(ctx context.Context, e *advEnv) error {
		return func(ctx context.Context, e *advEnv) error {
			_, err := e.arrays.CreateArray(ctx, &gatewayv1.CreateArrayRequest{Path: "a", Shape: shape, DataType: dtype, ChunkShape: chunks})
			return err
		}
	}
	read := func(path string, sel ...*gatewayv1.Slice) func(ctx context.Context, e *advEnv) error {
		return func(ctx context.Context, e *advEnv) error {
			_, err := drainSlab(ctx, e.arrays, path, sel, nil)
			return err
		}
	}
	// header writes a WriteSlab header over sel and closes the stream.
	header := func(path string, sel ...*gatewayv1.Slice) func(ctx context.Context, e *advEnv) error {
		return func(ctx context.Context, e *advEnv) error { return writeSlab(ctx, e, path, sel) }
	}
	array := func(path string, shape, chunks []uint64, dtype string) func(t *testing.T, e *advEnv) {
		return func(t *testing.T, e *advEnv) {
			mkArray(t, e, &gatewayv1.CreateArrayRequest{Path: path, Shape: shape, DataType: dtype, ChunkShape: chunks})
		}
	}
	const tera = 1_000_000_000_000
	u8 := array("w", []uint64{100}, []uint64{10}, "uint8")
	str := array("w", []uint64{4}, []uint64{4}, "string")
	long := strings.Repeat("x", 256)
	hdr := func(path string, sel ...*gatewayv1.Slice) *gatewayv1.WriteSlabRequest {
		return &gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Header{Header: &gatewayv1.WriteSlabHeader{Path: path, Selection: sel}}}
	}
	blk := func(b *gatewayv1.Block) *gatewayv1.WriteSlabRequest {
		return &gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Block{Block: b}}
	}
	whole := &gatewayv1.Block{Origin: []uint64{0}, Shape: []uint64{100}, Data: make([]byte, 100)}

	return []advCase{
		// Metadata whose chunks or products are out of reach.
		{name: "CreateArray [2^40] chunks [2^40] uint8", want: tooBig, msg: "chunk", run: create([]uint64{1 << 40}, []uint64{1 << 40}, "uint8"), maxRSS: advLean},
		{name: "CreateArray [2^31,2^31] chunks [2^31,2^31] uint8", want: tooBig, msg: "chunk", run: create([]uint64{1 << 31, 1 << 31}, []uint64{1 << 31, 1 << 31}, "uint8"), maxRSS: advLean},
		{name: "CreateArray [2^40,2^40] chunks [2^32,2^32] (elements overflow int64)", want: inv, run: create([]uint64{1 << 40, 1 << 40}, []uint64{1 << 32, 1 << 32}, "uint8"), maxRSS: advLean},
		{name: "CreateArray [2^63+1] (shape over int64)", want: inv, run: create([]uint64{1<<63 + 1}, []uint64{1024}, "uint8"), maxRSS: advLean},
		{name: "CreateArray of 100000 dimensions", want: inv, run: create(ones(100000), ones(100000), "uint8"), maxRSS: advLean},
		{name: "ReadSlab with a selection of 100000 dimensions", want: inv, maxRSS: advLean, run: func(ctx context.Context, e *advEnv) error {
			sel := make([]*gatewayv1.Slice, 100000)
			for i := range sel {
				sel[i] = &gatewayv1.Slice{Stop: 1}
			}
			st, err := e.arrays.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "a", Selection: sel})
			if err != nil {
				return err
			}
			for {
				if _, err := st.Recv(); err != nil {
					return err
				}
			}
		}},
		{name: "CreateArray chunks [2^61] float64 (bytes overflow int64)", want: tooBig, run: create([]uint64{1 << 61}, []uint64{1 << 61}, "float64"), maxRSS: advLean},
		{name: "CreateArray [2^62,2^62] chunks [1024,1024], read all", want: tooBig, maxRSS: advLean,
			run: func(ctx context.Context, e *advEnv) error {
				if err := create([]uint64{1 << 62, 1 << 62}, []uint64{1024, 1024}, "uint8")(ctx, e); err != nil {
					return err
				}
				return read("a")(ctx, e)
			}},
		{name: "read all of [2^31,2^31] chunks [1000,1000]", want: exhausted, maxRSS: advLean,
			setup: array("a", []uint64{1 << 31, 1 << 31}, []uint64{1000, 1000}, "uint8"), run: read("a")},
		{name: "stored zarr.json with a 2^36-element chunk, read 1 element", want: exhausted, msg: "chunk", maxRSS: advLean,
			setup: func(t *testing.T, e *advEnv) {
				put(t, e, "a/zarr.json", v3Meta([]uint64{1 << 36}, []uint64{1 << 36}, "uint8", zstdChain))
			},
			run: read("a", &gatewayv1.Slice{Start: 5, Stop: 6, Step: 1})},

		// Huge virtual arrays with small chunks.
		{name: "[10^12] chunks [1000]: read all", want: exhausted, maxRSS: advLean,
			setup: array("a", []uint64{tera}, []uint64{1000}, "uint8"), run: read("a")},
		// 10^9 elements, one from each of 10^9 chunks: refused for its cost,
		// or (if a gateway can) streamed within the bounds.
		{name: "[10^12] chunks [1000]: read step 1000", want: []codes.Code{codes.ResourceExhausted, codes.OK}, maxRSS: advLean,
			setup: array("a", []uint64{tera}, []uint64{1000}, "uint8"),
			run: func(ctx context.Context, e *advEnv) error {
				n, err := drainSlab(ctx, e.arrays, "a", []*gatewayv1.Slice{{Start: 0, Stop: tera, Step: 1000}}, func(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) })
				if err == nil && n != tera/1000 {
					err = fmt.Errorf("read %d bytes of 10^9", n)
				}
				return err
			}},
		{name: "[10^12] chunks [1000]: WriteSlab header over all", want: tooBig, maxRSS: advLean,
			setup: array("a", []uint64{tera}, []uint64{1000}, "uint8"), run: header("a", all(tera)...)},
		{name: "[10^12] chunks [1000]: read 4 KiB", want: []codes.Code{codes.OK}, maxTime: 2 * time.Second, maxRSS: advLean,
			setup: array("a", []uint64{tera}, []uint64{1000}, "uint8"),
			run: func(ctx context.Context, e *advEnv) error {
				n, err := drainSlab(ctx, e.arrays, "a", []*gatewayv1.Slice{{Start: tera/2 - 100, Stop: tera/2 + 3996, Step: 1}}, func(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) })
				if err == nil && n != 4096 {
					err = fmt.Errorf("read %d bytes of 4096", n)
				}
				return err
			}},
		{name: "[10^12] chunks [10^5]: read all", want: exhausted, maxRSS: advLean,
			setup: array("a", []uint64{tera}, []uint64{100_000}, "uint8"), run: read("a")},
		{name: "[10^12] chunks [10^5]: WriteSlab header over all", want: tooBig, maxRSS: advLean,
			setup: array("a", []uint64{tera}, []uint64{100_000}, "uint8"), run: header("a", all(tera)...)},
		// 1 GiB of fill value, 4× the budget: streamed, not held.
		{name: "fill-only read of [2^18,2^10] float32, 256² chunks (1 GiB)", want: []codes.Code{codes.OK}, maxTime: 20 * time.Second, maxRSS: 192 * MiB,
			setup: array("a", []uint64{1 << 18, 1 << 10}, []uint64{256, 256}, "float32"),
			run: func(ctx context.Context, e *advEnv) error {
				n, err := drainSlab(ctx, e.arrays, "a", nil, func(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) })
				if err == nil && n != 1<<30 {
					err = fmt.Errorf("read %d bytes of 1 GiB", n)
				}
				return err
			}},

		// Decompression bombs: 4 KiB chunks whose stored bytes inflate to
		// 256 MiB or 1 GiB (or claim 512 GiB).
		bombCase("gzip, 256 MiB of zeros", gzipChain, gzipBomb),
		bombCase("zstd, 1 GiB in RLE blocks (32 KiB)", zstdChain, func() []byte { return newZstdFrame().rle(0, 1<<30).finish() }),
		bombCase("zstd frame header claiming 2^39 bytes", zstdChain, func() []byte { return zstdClaiming(1 << 39) }),
		bombCase("blosc lz4", `[`+bytesLE+`,{"name":"blosc","configuration":{"cname":"lz4","clevel":1,"shuffle":"noshuffle","typesize":1,"blocksize":0}}]`, nil),
		bombCase("blosc zstd", `[`+bytesLE+`,{"name":"blosc","configuration":{"cname":"zstd","clevel":1,"shuffle":"noshuffle","typesize":1,"blocksize":0}}]`, nil),
		bombCase("blosc blosclz", `[`+bytesLE+`,{"name":"blosc","configuration":{"cname":"blosclz","clevel":5,"shuffle":"shuffle","typesize":1,"blocksize":0}}]`, nil),
		bombCase("numcodecs.bz2", `[`+bytesLE+`,{"name":"numcodecs.bz2","configuration":{"level":1}}]`, nil),
		bombCase("numcodecs.lz4", `[`+bytesLE+`,{"name":"numcodecs.lz4","configuration":{"acceleration":1}}]`, nil),
		{name: "bomb: zlib, v2 .zarray", want: []codes.Code{codes.DataLoss}, maxRSS: advLean,
			setup: func(t *testing.T, e *advEnv) {
				put(t, e, "z/.zarray", []byte(`{"zarr_format":2,"shape":[4096],"chunks":[4096],"dtype":"|u1","compressor":{"id":"zlib","level":1},"fill_value":0,"order":"C","filters":null}`))
				put(t, e, "z/0", encodeBomb(t, `[`+bytesLE+`,{"name":"numcodecs.zlib","configuration":{"level":1}}]`))
			},
			run: read("z")},
		stringBombCase("string bomb: 16 strings, gzip 1 MiB → 1 GiB", `[{"name":"vlen-utf8"},{"name":"gzip","configuration":{"level":1}}]`, stringGzipBomb, 1),
		stringBombCase("string bomb: 16 strings, zstd 32 KiB → 1 GiB", `[{"name":"vlen-utf8"},{"name":"zstd","configuration":{"level":3,"checksum":false}}]`, stringZstdBomb, 1),
		stringBombCase("string bomb: gzip, 4 readers at once", `[{"name":"vlen-utf8"},{"name":"gzip","configuration":{"level":1}}]`, stringGzipBomb, 4),
		{name: "codec-worker: Decode of a 17-byte zstd frame claiming 2^39, chunk [2^40]", worker: true, want: tooBig, maxRSS: advLean,
			run: func(ctx context.Context, e *advEnv) error {
				_, err := e.codec.Decode(ctx, &codecv1.DecodeRequest{
					Spec:    &codecv1.ChunkSpec{DataType: "uint8", ChunkShape: []uint64{1 << 40}, CodecsJson: zstdChain},
					Encoded: [][]byte{zstdClaiming(1 << 39)},
				})
				return err
			}},
		{name: "codec-worker: Decode of the gzip string bomb", worker: true, want: []codes.Code{codes.DataLoss, codes.ResourceExhausted},
			run: func(ctx context.Context, e *advEnv) error {
				_, err := e.codec.Decode(ctx, &codecv1.DecodeRequest{
					Spec:    &codecv1.ChunkSpec{DataType: "string", ChunkShape: []uint64{strBombN}, CodecsJson: `[{"name":"vlen-utf8"},{"name":"gzip","configuration":{"level":1}}]`},
					Encoded: [][]byte{stringGzipBomb()},
				})
				return err
			}},

		// Lying shard indexes.
		shardCase("entry past the shard's end", func(body []byte, idx []uint64) []byte {
			idx[0] = uint64(len(body)) + 1000
			return shardWith(body, idx)
		}),
		shardCase("entry of 2^40 bytes", func(body []byte, idx []uint64) []byte {
			idx[1] = 1 << 40
			return shardWith(body, idx)
		}),
		shardCase("overlapping entries", func(body []byte, idx []uint64) []byte {
			idx[2], idx[3] = idx[0]+idx[1]/2, idx[1]
			return shardWith(body, idx)
		}),
		shardCase("offset + nbytes overflows", func(body []byte, idx []uint64) []byte {
			idx[0], idx[1] = math.MaxUint64-10, 100
			return shardWith(body, idx)
		}),
		shardCase("shard shorter than its index", func(body []byte, idx []uint64) []byte {
			return shardWith(nil, idx)[:100]
		}),

		// Invalid blocks.
		{name: "WriteSlab block origin + shape > 2^63", want: inv, setup: u8,
			run: func(ctx context.Context, e *advEnv) error {
				return writeSlab(ctx, e, "w", all(100), &gatewayv1.Block{Origin: []uint64{1 << 63}, Shape: []uint64{1 << 63}})
			}},
		{name: "WriteSlab block origin + shape wraps around 2^64", want: inv, setup: u8,
			run: func(ctx context.Context, e *advEnv) error {
				return writeSlab(ctx, e, "w", all(100), whole, &gatewayv1.Block{Origin: []uint64{math.MaxUint64}, Shape: []uint64{2}, Data: []byte{1, 2}})
			}},
		{name: "WriteSlab block past the selection", want: []codes.Code{codes.InvalidArgument, codes.OutOfRange}, setup: u8,
			run: func(ctx context.Context, e *advEnv) error {
				return writeSlab(ctx, e, "w", all(100), &gatewayv1.Block{Origin: []uint64{90}, Shape: []uint64{20}, Data: make([]byte, 20)})
			}},
		{name: "WriteSlab overlapping blocks", want: inv, setup: u8,
			run: func(ctx context.Context, e *advEnv) error {
				return writeSlab(ctx, e, "w", all(100), &gatewayv1.Block{Origin: []uint64{0}, Shape: []uint64{60}, Data: make([]byte, 60)},
					&gatewayv1.Block{Origin: []uint64{40}, Shape: []uint64{60}, Data: make([]byte, 60)})
			}},
		{name: "WriteSlab block with too few bytes", want: inv, setup: u8,
			run: func(ctx context.Context, e *advEnv) error {
				return writeSlab(ctx, e, "w", all(100), &gatewayv1.Block{Origin: []uint64{0}, Shape: []uint64{100}, Data: make([]byte, 99)})
			}},
		{name: "WriteSlab block with too many bytes", want: inv, setup: u8,
			run: func(ctx context.Context, e *advEnv) error {
				return writeSlab(ctx, e, "w", all(100), &gatewayv1.Block{Origin: []uint64{0}, Shape: []uint64{100}, Data: make([]byte, 101)})
			}},
		{name: "WriteSlab string block, not UTF-8", want: inv, setup: str,
			run: func(ctx context.Context, e *advEnv) error {
				return writeSlab(ctx, e, "w", all(4), stringBlock([]uint64{0}, []uint64{4}, "ok", "b\xff\xfed", "", "é"))
			}},
		{name: "WriteSlab string block, last offset != len(data)", want: inv, setup: str,
			run: func(ctx context.Context, e *advEnv) error {
				b := stringBlock([]uint64{0}, []uint64{4}, "a", "b", "c", "d")
				b.Offsets[4] = 40
				return writeSlab(ctx, e, "w", all(4), b)
			}},
		{name: "WriteSlab string block, decreasing offsets", want: inv, setup: str,
			run: func(ctx context.Context, e *advEnv) error {
				b := stringBlock([]uint64{0}, []uint64{4}, "aa", "bb", "cc", "dd")
				b.Offsets[2] = 1 << 62
				return writeSlab(ctx, e, "w", all(4), b)
			}},
		{name: "WriteSlab string block, 3 offsets for 4 strings", want: inv, setup: str,
			run: func(ctx context.Context, e *advEnv) error {
				b := stringBlock([]uint64{0}, []uint64{4}, "a", "b", "c", "d")
				b.Offsets = b.Offsets[:3]
				return writeSlab(ctx, e, "w", all(4), b)
			}},

		// Streams that end early, repeat or come out of order.
		{name: "WriteSlab empty stream", want: inv, setup: u8, run: func(ctx context.Context, e *advEnv) error { return writeSlabMsgs(ctx, e) }},
		{name: "WriteSlab header only", want: inv, setup: u8, run: header("w", all(100)...)},
		{name: "WriteSlab two headers", want: inv, setup: u8,
			run: func(ctx context.Context, e *advEnv) error {
				return writeSlabMsgs(ctx, e, hdr("w", all(100)...), hdr("w", all(100)...), blk(whole))
			}},
		{name: "WriteSlab block before the header", want: inv, setup: u8,
			run: func(ctx context.Context, e *advEnv) error {
				return writeSlabMsgs(ctx, e, blk(whole), hdr("w", all(100)...))
			}},
		{name: "Set empty stream", want: inv, run: func(ctx context.Context, e *advEnv) error { return setMsgs(ctx, e) }},
		{name: "Set without a header", want: inv, run: func(ctx context.Context, e *advEnv) error {
			return setMsgs(ctx, e, &storev1.SetRequest{Data: []byte("x")})
		}},
		{name: "Set with two headers", want: inv,
			run: func(ctx context.Context, e *advEnv) error {
				h := &storev1.SetHeader{Key: "k"}
				return setMsgs(ctx, e, &storev1.SetRequest{Header: h, Data: []byte("x")}, &storev1.SetRequest{Header: h, Data: []byte("y")})
			}},
		{name: "ReadSlabShared release before the read", want: inv,
			run: func(ctx context.Context, e *advEnv) error {
				st, err := e.arrays.ReadSlabShared(ctx)
				if err != nil {
					return err
				}
				st.Send(&gatewayv1.ReadSlabSharedRequest{Message: &gatewayv1.ReadSlabSharedRequest_Release{Release: &gatewayv1.SharedRelease{Blocks: 3}}})
				st.CloseSend()
				for {
					if _, err := st.Recv(); err != nil {
						if err == io.EOF {
							return nil
						}
						return err
					}
				}
			}},
		{name: "GetPartialValuesShared release before the read", want: inv,
			run: func(ctx context.Context, e *advEnv) error {
				return sharedValuesMsgs(ctx, e, &storev1.GetPartialValuesSharedRequest{Release: 3})
			}},
		{name: "GetPartialValuesShared empty stream", want: inv,
			run: func(ctx context.Context, e *advEnv) error { return sharedValuesMsgs(ctx, e) }},
		{name: "GetPartialValuesShared release of more than it was sent", want: inv,
			run: func(ctx context.Context, e *advEnv) error {
				yes := true
				read := &storev1.GetPartialValuesRequest{Ranges: []*storev1.KeyRange{{Key: "k"}}}
				return sharedValuesMsgs(ctx, e, &storev1.GetPartialValuesSharedRequest{Read: read},
					&storev1.GetPartialValuesSharedRequest{Attach: &yes}, &storev1.GetPartialValuesSharedRequest{Release: 1 << 40})
			}},
		{name: "ReadSlabShared empty stream", want: inv,
			run: func(ctx context.Context, e *advEnv) error {
				st, err := e.arrays.ReadSlabShared(ctx)
				if err != nil {
					return err
				}
				st.CloseSend()
				_, err = st.Recv()
				if err == io.EOF {
					return nil
				}
				return err
			}},

		// WriteSlabShared: client memory the gateway must not read is
		// refused (OK, the reason in the answer; refusedOnly makes an
		// acceptance an error) before a byte is read or written.
		{name: "WriteSlabShared without a source", want: inv,
			run: func(ctx context.Context, e *advEnv) error {
				_, err := e.arrays.WriteSlabShared(ctx, &gatewayv1.WriteSlabSharedRequest{Path: "health"})
				return err
			}},
		{name: "WriteSlabShared of another process's memory", want: []codes.Code{codes.OK},
			run: func(ctx context.Context, e *advEnv) error {
				return refusedOnly(e.arrays.WriteSlabShared(ctx, &gatewayv1.WriteSlabSharedRequest{Path: "health",
					Source: &gatewayv1.SharedDestination{Pid: 1, Fd: 0, Size: 16, Token: bytes.Repeat([]byte{7}, 16)}}))
			}},
		{name: "WriteSlabShared of 1 MiB claiming 2^64-1 bytes of a 4 KiB memory file", want: []codes.Code{codes.OK},
			setup: createFlat("mib", 1<<20, 1<<16), run: writeSharedPastFile("mib")},
		{name: "WriteSlabShared of a 1 TiB slab", want: tooBig,
			setup: createFlat("tib", 1<<40, 1<<20), run: writeSharedPastFile("tib")},

		// Keys and paths.
		{name: "Get of a key with a 256-byte segment", want: inv, run: func(ctx context.Context, e *advEnv) error {
			return rawCall(ctx, e, "/zarrgate.store.v1.StoreService/Get", true, false, "a/"+long+"/b")
		}},
		{name: "Set of a key with a 256-byte segment", want: inv, run: func(ctx context.Context, e *advEnv) error {
			return setMsgs(ctx, e, &storev1.SetRequest{Header: &storev1.SetHeader{Key: "a/" + long}, Data: []byte("x")})
		}},
		{name: "CreateArray at a path with a 256-byte segment", want: inv, run: func(ctx context.Context, e *advEnv) error {
			_, err := e.arrays.CreateArray(ctx, &gatewayv1.CreateArrayRequest{Path: long, Shape: []uint64{4}, DataType: "uint8"})
			return err
		}},
		{name: "Get of a key that is not UTF-8", want: inv, run: func(ctx context.Context, e *advEnv) error {
			return rawCall(ctx, e, "/zarrgate.store.v1.StoreService/Get", true, false, "a/\xff\xfe")
		}},
		{name: "Set of a key that is not UTF-8", want: inv, run: func(ctx context.Context, e *advEnv) error {
			return rawCall(ctx, e, "/zarrgate.store.v1.StoreService/Set", false, true, "a/\xff\xfe")
		}},
		{name: "Erase of a key that is not UTF-8", want: inv, run: func(ctx context.Context, e *advEnv) error {
			return rawCall(ctx, e, "/zarrgate.store.v1.StoreService/Erase", false, false, "\xc3\x28")
		}},
		{name: "GetNode of a path that is not UTF-8", want: inv, run: func(ctx context.Context, e *advEnv) error {
			return rawCall(ctx, e, "/zarrgate.gateway.v1.ArrayService/GetNode", false, false, "g/\xff")
		}},
		{name: "ReadSlab of a path that is not UTF-8", want: inv, run: func(ctx context.Context, e *advEnv) error {
			return rawCall(ctx, e, "/zarrgate.gateway.v1.ArrayService/ReadSlab", true, false, "a/\xff")
		}},
		{name: "ListPrefix of bytes that are no message", want: inv, run: func(ctx context.Context, e *advEnv) error {
			return rawSend(ctx, e, "/zarrgate.store.v1.StoreService/ListPrefix", true, false, []byte{0xff, 0xff})
		}},
		{name: "Get of a temporary file's name", want: inv, run: func(ctx context.Context, e *advEnv) error {
			return rawCall(ctx, e, "/zarrgate.store.v1.StoreService/Get", true, false, "a/.zarrgate-tmp-0123456789abcdef")
		}},
	}
}

// TestAdversarialBombsAreValid checks that the bombs of the suite are what
// they claim, valid streams of that many bytes: a bomb that were merely
// corrupt would be refused for that, and prove nothing.
func TestAdversarialBombsAreValid(t *testing.T) {
	strSize := int64(4 + strBombN*(4+strBombLen))
	for _, c := range []struct {
		name string
		data []byte
		gz   bool
		want int64
	}{
		{"gzip", gzipBomb(), true, 256 << 20},
		{"zstd RLE", newZstdFrame().rle(0, 1<<30).finish(), false, 1 << 30},
		{"string gzip", stringGzipBomb(), true, strSize},
		{"string zstd", stringZstdBomb(), false, strSize},
	} {
		var r io.Reader
		if c.gz {
			zr, err := gzip.NewReader(bytes.NewReader(c.data))
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			r = zr
		} else {
			zr, err := zstd.NewReader(bytes.NewReader(c.data))
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			defer zr.Close()
			r = zr
		}
		n, err := io.Copy(io.Discard, r)
		if err != nil || n != c.want {
			t.Errorf("%s: %d bytes decode to %d (%v), want %d", c.name, len(c.data), n, err, c.want)
		}
		t.Logf("%s: %d bytes → %d", c.name, len(c.data), n)
	}
	// The lying frame claims 2^39 bytes in its header and holds none.
	var h zstd.Header
	if err := h.Decode(zstdClaiming(1 << 39)); err != nil || !h.HasFCS || h.FrameContentSize != 1<<39 {
		t.Errorf("lying frame header: %v %+v", err, h)
	}
}
