package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/zarrgate/zarrgate/client"
)

// segments lists the shared-memory segments a process holds open.
func segments(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if dest, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", fd.Name())); err == nil && strings.Contains(dest, "memfd:zarrgate-slab") {
			n++
		}
	}
	return n
}

// TestSharedMemoryReads: a client on the gateway's host reads large slabs
// through a shared-memory segment of a real `zarrgate serve` (the gateway
// keeps it for the next read), with the same values as over the socket;
// with --shared-memory=false the gateway makes no segment and the same
// client reads over the socket.
// serveSharedOrNot starts `zarrgate serve` on root, with its shared memory
// on or off (--shared-memory=false), and dials it with the default client.
func serveSharedOrNot(t *testing.T, root string, on bool) (*server, *client.Client) {
	t.Helper()
	args := []string{"--root", root}
	if !on {
		args = append(args, "--shared-memory=false")
	}
	s := startServer(t, args...)
	c, err := client.Dial(context.Background(), s.addr)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func TestSharedMemoryReads(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc here")
	}
	ctx := context.Background()
	root := t.TempDir()
	for _, on := range []bool{true, false} {
		s, c := serveSharedOrNot(t, root, on)
		sock, err := client.Dial(ctx, s.addr, client.WithSharedMemory(false))
		if err != nil {
			t.Fatal(err)
		}
		const n = 1024
		a, err := c.OpenArray(ctx, "a")
		if err != nil {
			if a, err = c.CreateArray(ctx, "a", client.ArraySpec{Shape: []int64{n, n}, DataType: "float32", ChunkShape: []int64{128, 256},
				Codecs: `[{"name":"bytes","configuration":{"endian":"little"}}]`}); err != nil {
				t.Fatal(err)
			}
			want := make([]float32, n*n)
			for i := range want {
				want[i] = float32(i)
			}
			if _, err := client.Write(ctx, a, client.MustParseSelection("0:512,0:1024"), want[:n*n/2]); err != nil {
				t.Fatal(err)
			}
		}
		if got := segments(t, s.cmd.Process.Pid); got != 0 {
			t.Fatalf("shared memory %v: %d segments before any read", on, got)
		}
		for _, sel := range []client.Selection{nil, client.MustParseSelection("1:1000:3,5:1024")} {
			viaShm, _, err := client.Read[float32](ctx, a, sel)
			if err != nil {
				t.Fatal(err)
			}
			sa, _ := sock.OpenArray(ctx, "a")
			viaSocket, _, err := client.Read[float32](ctx, sa, sel)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(viaShm, viaSocket) {
				t.Fatalf("shared memory %v, selection %v: the two reads differ", on, sel)
			}
			if sel == nil && (viaShm[n*n/2-1] != n*n/2-1 || viaShm[n*n/2] != 0) {
				t.Fatalf("read %v, %v around the written half", viaShm[n*n/2-1], viaShm[n*n/2])
			}
		}
		want := 0
		if on {
			want = 1 // lent to each read in turn, kept for the next
		}
		if got := segments(t, s.cmd.Process.Pid); got != want {
			t.Fatalf("shared memory %v: the gateway holds %d segments after two reads, want %d", on, got, want)
		}
		c.Close()
		sock.Close()
		s.cmd.Process.Kill()
		<-s.done
	}
}

// TestReadSharedAcrossProcesses: a real `zarrgate serve`, another
// process, writes slabs into the test's SharedBuffer itself (its own
// memory file, opened through /proc), the same values as over the socket,
// and keeps the mapping for the next read; with --shared-memory=false it
// refuses, and the slab is copied in.
func TestReadSharedAcrossProcesses(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc here")
	}
	ctx := context.Background()
	root := t.TempDir()
	const n = 1000 // edge chunks of 1000 % 256 = 232
	want := make([]int32, n*n)
	for i := range want {
		want[i] = int32(i)
	}
	buf, err := client.NewSharedBuffer(n * n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Close()
	// dests counts the mappings of destinations in a process.
	dests := func(pid int) int {
		maps, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "maps"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(maps), "memfd:zarrgate-dest")
	}
	for _, on := range []bool{true, false} {
		s, c := serveSharedOrNot(t, root, on)
		a, err := c.OpenArray(ctx, "a")
		if err != nil {
			if a, err = c.CreateArray(ctx, "a", client.ArraySpec{Shape: []int64{n, n}, DataType: "int32", ChunkShape: []int64{256, 256},
				Codecs: `[{"name":"bytes","configuration":{"endian":"little"}}]`}); err != nil {
				t.Fatal(err)
			}
			if _, err := client.Write(ctx, a, nil, want); err != nil {
				t.Fatal(err)
			}
		}
		for _, sel := range []client.Selection{nil, client.MustParseSelection("3:999,256:1000"), client.MustParseSelection("1:1000:3,5:1000")} {
			clear(buf.Bytes())
			got, err := client.ReadShared[int32](ctx, a, sel, buf)
			if err != nil {
				t.Fatal(err)
			}
			if ok, why := buf.InPlace(); ok != on {
				t.Fatalf("shared memory %v, selection %v: in place %v (%s)", on, sel, ok, why)
			}
			var exp []int32
			sh := sel.Shape([]int64{n, n})
			for i := range sh[0] {
				for j := range sh[1] {
					r, c := i, j
					if sel != nil {
						r, c = sel[0].Start+i*max(sel[0].Step, 1), sel[1].Start+j*max(sel[1].Step, 1)
					}
					exp = append(exp, want[r*n+c])
				}
			}
			if !slices.Equal(got, exp) {
				t.Fatalf("shared memory %v, selection %v: differs", on, sel)
			}
		}
		k := 0
		if on {
			k = 1 // the mapping kept for the next read
		}
		if got := dests(s.cmd.Process.Pid); got != k {
			t.Fatalf("shared memory %v: the gateway maps %d destinations, want %d", on, got, k)
		}
		c.Close()
		s.cmd.Process.Kill()
		<-s.done
	}
}

// TestWriteSharedAcrossProcesses: a real `zarrgate serve`, another
// process, reads slabs to write from the test's SharedBuffer itself (its
// own memory file, opened through /proc): whole arrays, partial edge
// chunks and strided selections land as they would over the socket, and
// the rest of each array stays the fill value; with --shared-memory=false
// it refuses, and the slab is sent instead.
func TestWriteSharedAcrossProcesses(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc here")
	}
	ctx := context.Background()
	const n = 1000 // edge chunks of 1000 % 256 = 232
	buf, err := client.NewSharedBuffer(n * n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Close()
	for _, on := range []bool{true, false} {
		s, c := serveSharedOrNot(t, t.TempDir(), on)
		for k, sel := range []client.Selection{nil, client.MustParseSelection("3:999,256:1000"), client.MustParseSelection("1:1000:3,5:1000")} {
			a, err := c.CreateArray(ctx, fmt.Sprintf("w%d", k), client.ArraySpec{Shape: []int64{n, n}, DataType: "int32", ChunkShape: []int64{256, 256},
				Codecs: `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}]`})
			if err != nil {
				t.Fatal(err)
			}
			sh := sel.Shape([]int64{n, n})
			src := unsafe.Slice((*int32)(unsafe.Pointer(&buf.Bytes()[0])), sh[0]*sh[1])
			want := make([]int32, n*n)
			for i := range sh[0] {
				for j := range sh[1] {
					r, c := i, j
					if sel != nil {
						r, c = sel[0].Start+i*max(sel[0].Step, 1), sel[1].Start+j*max(sel[1].Step, 1)
					}
					v := int32(r*n+c) + 1
					src[i*sh[1]+j] = v
					want[r*n+c] = v
				}
			}
			st, err := client.WriteShared[int32](ctx, a, sel, buf)
			if err != nil {
				t.Fatal(err)
			}
			if ok, why := buf.InPlace(); ok != on {
				t.Fatalf("shared memory %v, selection %v: in place %v (%s)", on, sel, ok, why)
			}
			if st.Chunks == 0 {
				t.Fatalf("shared memory %v, selection %v: no chunks written", on, sel)
			}
			got := make([]int32, n*n)
			if err := client.ReadInto(ctx, a, nil, got); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("shared memory %v, selection %v: the array differs from what was written", on, sel)
			}
		}
		c.Close()
		s.cmd.Process.Kill()
		<-s.done
	}
}
