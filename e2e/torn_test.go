package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"
	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"
)

// No torn chunk, ever (issue 12): a WriteSlab larger than the gateway's
// write buffer, tiled across chunks every way, is killed with SIGKILL at
// random points of its stream; after a restart every chunk (every shard,
// for a sharded array) holds entirely the data it had before the write or
// entirely the new data, and no temporary file of the killed write is left
// in the store.
//
// The array is 2048² uint32 (16 MiB), chunks of 512×256 (512 KiB): a row
// of chunks is 4 MiB and a column 2 MiB, both larger than the 1 MiB write
// buffer, so the gateway must hold back (or spill) partial chunks rather
// than merge them early. Every element of generation g holds
// g<<24 | (its flat index mod 2^24), so a chunk mixing two writes, or
// holding data of the wrong place, shows.
const (
	tornSide        = 2048
	tornWriteBuffer = "1048576" // --write-buffer-bytes: 1 MiB
)

// tornTiling is a way to cut the array into blocks, in sending order.
type tornTiling struct {
	name       string
	sharded    bool
	durability string                      // --durability, if set
	blocks     func(r *rand.Rand) [][4]int // origin row, col; rows, cols
}

func TestTornChunksAfterSIGKILL(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 42))
	// Spill files, if the gateway puts them in the temporary directory,
	// land in the test's (and the roots beside it, not in it).
	base := t.TempDir()
	spill := filepath.Join(base, "tmp")
	if err := os.Mkdir(spill, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", spill)

	tilings := []tornTiling{
		{name: "16-row strips", blocks: func(*rand.Rand) [][4]int { return tiles(16, tornSide) }},
		{name: "16-column strips", blocks: func(*rand.Rand) [][4]int { return tiles(tornSide, 16) }},
		{name: "48×80 tiles in random order", blocks: func(r *rand.Rand) [][4]int {
			b := tiles(48, 80)
			r.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
			return b
		}},
		// Without fsyncs (zarr-python's durability): a killed server
		// tears nothing either (the page cache outlives it).
		{name: "16-row strips, --durability none", durability: "none", blocks: func(*rand.Rand) [][4]int { return tiles(16, tornSide) }},
		{name: "sharded, 16-row strips", sharded: true, blocks: func(*rand.Rand) [][4]int { return tiles(16, tornSide) }},
		{name: "sharded, 48×80 tiles in random order", sharded: true, blocks: func(r *rand.Rand) [][4]int {
			b := tiles(48, 80)
			r.Shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
			return b
		}},
	}
	for _, tl := range tilings {
		t.Run(tl.name, func(t *testing.T) {
			root, err := os.MkdirTemp(base, "root-")
			if err != nil {
				t.Fatal(err)
			}
			args := []string{"--root", root, "--write-buffer-bytes", tornWriteBuffer}
			if tl.durability != "" {
				args = append(args, "--durability", tl.durability)
			}
			srv := startServer(t, args...)
			e := tornDial(t, srv)
			unit := [2]int{512, 256} // the unit that must not tear: a chunk
			req := &gatewayv1.CreateArrayRequest{Path: "a", Shape: []uint64{tornSide, tornSide}, DataType: "uint32", ChunkShape: []uint64{512, 256}}
			if tl.sharded {
				req.ShardShape = []uint64{1024, 1024}
				unit = [2]int{1024, 1024} // or a shard, written as one object
			}
			mkArray(t, e, req)
			// Generation 1, written whole chunk by whole chunk: the old data.
			if err := tornWrite(t, e, 1, tiles(unit[0], unit[1]), -1); err != nil {
				t.Fatalf("writing the old data: %v", err)
			}
			gens := tornCheck(t, e, unit, nil, 1)
			// Kill points: early, late, and after the last block, while the
			// gateway stores what it held back.
			n := len(tl.blocks(r))
			points := []int{n/10 + r.IntN(n/4), n/2 + r.IntN(n/3), n}
			for i, at := range points {
				gen := uint32(2 + i)
				err := tornWrite(t, e, gen, tl.blocks(r), at)
				t.Logf("generation %d: killed after block %d of %d (write: %v)", gen, at, n, err)
				srv = startServer(t, args...)
				e = tornDial(t, srv)
				gens = tornCheck(t, e, unit, gens, gen)
				tornNoTempFiles(t, root)
				if t.Failed() {
					break // the next kills would only repeat it
				}
			}
			// Not a rule of the issue (the spill area is the gateway's
			// choice), but worth seeing.
			if matches, _ := filepath.Glob(filepath.Join(spill, "*")); len(matches) > 0 {
				t.Logf("left in the temporary directory after the kills: %q", matches)
			}
		})
	}
}

// tiles cuts the array into blocks of rows×cols (smaller at the edges),
// row by row.
func tiles(rows, cols int) [][4]int {
	var b [][4]int
	for i := 0; i < tornSide; i += rows {
		for j := 0; j < tornSide; j += cols {
			b = append(b, [4]int{i, j, min(rows, tornSide-i), min(cols, tornSide-j)})
		}
	}
	return b
}

func tornDial(t *testing.T, srv *server) *advEnv {
	cc, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64*MiB), grpc.MaxCallSendMsgSize(64*MiB)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &advEnv{srv: srv, cc: cc, arrays: gatewayv1.NewArrayServiceClient(cc), store: storev1.NewStoreServiceClient(cc)}
}

func tornValue(gen uint32, i, j int) uint32 { return gen<<24 | uint32(i*tornSide+j)&(1<<24-1) }

// tornWrite writes generation gen over the whole array, block by block.
// With killAfter ≥ 0 it kills the server with SIGKILL after sending that
// many blocks (all of them: after closing the stream, a moment later, while
// the gateway stores what it held), and returns the stream's error, if any.
func tornWrite(t *testing.T, e *advEnv, gen uint32, blocks [][4]int, killAfter int) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kill := func() {
		e.srv.cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-e.srv.done:
		case <-time.After(10 * time.Second):
			t.Fatal("the killed server did not exit")
		}
	}
	st, err := e.arrays.WriteSlab(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Header{Header: &gatewayv1.WriteSlabHeader{Path: "a", Selection: all(tornSide, tornSide)}}}); err != nil {
		return err
	}
	for k, b := range blocks {
		if k == killAfter {
			kill()
			return fmt.Errorf("killed")
		}
		data := make([]byte, 0, 4*b[2]*b[3])
		for i := b[0]; i < b[0]+b[2]; i++ {
			for j := b[1]; j < b[1]+b[3]; j++ {
				data = binary.LittleEndian.AppendUint32(data, tornValue(gen, i, j))
			}
		}
		blk := &gatewayv1.Block{Origin: []uint64{uint64(b[0]), uint64(b[1])}, Shape: []uint64{uint64(b[2]), uint64(b[3])}, Data: data}
		if err := st.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Block{Block: blk}}); err != nil {
			break
		}
	}
	if killAfter >= 0 {
		st.CloseSend()
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		kill()
		return fmt.Errorf("killed after the last block")
	}
	_, err = st.CloseAndRecv()
	return err
}

// tornCheck reads the whole array and checks that each unit (chunk or
// shard) holds one generation, old (prev, or 1 without prev) or gen, with
// every element in its place. It returns the generation of each unit.
func tornCheck(t *testing.T, e *advEnv, unit [2]int, prev map[[2]int]uint32, gen uint32) map[[2]int]uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make([]uint32, tornSide*tornSide)
	st, err := e.arrays.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "a"})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for {
		m, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading back after the restart: %v", err)
		}
		b := m.GetBlock()
		if b == nil {
			continue
		}
		o, s, d := b.GetOrigin(), b.GetShape(), b.GetData()
		for i := range int(s[0]) {
			for j := range int(s[1]) {
				got[(int(o[0])+i)*tornSide+int(o[1])+j] = binary.LittleEndian.Uint32(d[4*(i*int(s[1])+j):])
			}
		}
		n += len(d)
	}
	if n != len(got)*4 {
		t.Fatalf("read %d bytes of %d", n, len(got)*4)
	}
	gens := make(map[[2]int]uint32)
	torn, news := 0, 0
	for ui := 0; ui < tornSide; ui += unit[0] {
		for uj := 0; uj < tornSide; uj += unit[1] {
			key := [2]int{ui / unit[0], uj / unit[1]}
			old := uint32(1)
			if prev != nil {
				old = prev[key]
			}
			first := got[ui*tornSide+uj] >> 24
			bad := ""
			for i := ui; i < ui+unit[0] && bad == ""; i++ {
				for j := uj; j < uj+unit[1]; j++ {
					v := got[i*tornSide+j]
					if v>>24 != first {
						bad = fmt.Sprintf("element (%d, %d) is of generation %d, (%d, %d) of %d", i, j, v>>24, ui, uj, first)
						break
					}
					if v != tornValue(v>>24, i, j) {
						bad = fmt.Sprintf("element (%d, %d) = %#x, not in its place", i, j, v)
						break
					}
				}
			}
			if bad == "" && first != old && first != gen {
				bad = fmt.Sprintf("generation %d, want %d (old) or %d (new)", first, old, gen)
			}
			if bad != "" {
				torn++
				if torn <= 5 {
					t.Errorf("unit %v after the kill: %s", key, bad)
				}
			}
			if first == gen {
				news++
			}
			gens[key] = first
		}
	}
	total := (tornSide / unit[0]) * (tornSide / unit[1])
	if torn > 0 {
		t.Errorf("%d of %d units torn", torn, total)
	}
	t.Logf("after the restart: %d of %d units new, %d torn", news, total, torn)
	return gens
}

// tornNoTempFiles fails if the file store's temporary files (named
// ".zarrgate-tmp-*", storesvc/file) are left in the root after a restart.
func tornNoTempFiles(t *testing.T, root string) {
	t.Helper()
	var left []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".zarrgate-tmp-") {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("%d temporary files left in the root after the restart, e.g. %s", len(left), left[0])
	}
}
