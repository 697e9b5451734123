package e2e

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/client"
)

// decodedChunks is how many chunks a codec worker has decoded (its
// /metrics).
func decodedChunks(t *testing.T, w *adminProc) float64 {
	t.Helper()
	n := 0.0
	for k, v := range w.scrape(t) {
		if strings.HasPrefix(k, "zarrgate_codec_chunks_total{") && strings.Contains(k, `op="decode"`) {
			n += v
		}
	}
	return n
}

// A gateway whose codec workers are listed in a file (--codec
// file:///…, read again every 200 ms). A slab is read, slowly, with one
// codec worker A; a second worker B is added to the file mid-slab: B
// decodes chunks of that same slab. Then A is removed from the file
// (still running) during a second slab: once the gateway has no stream
// left on A, A decodes nothing more, and the slab completes on B. Both
// slabs have the right values, and the gateway saw no error.
func TestCodecStreamsFollowWorkers(t *testing.T) {
	root := t.TempDir()
	list := filepath.Join(t.TempDir(), "codec-workers")
	store := startCommand(t, "store-worker", "--root", root)
	codecA := startWithAdmin(t, "codec-worker", true)
	codecB := startWithAdmin(t, "codec-worker", true)
	setList := func(addrs ...string) {
		t.Helper()
		// Written whole, then renamed: the gateway never reads half a list.
		tmp := list + ".tmp"
		if err := os.WriteFile(tmp, []byte("# codec workers\n"+strings.Join(addrs, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, list); err != nil {
			t.Fatal(err)
		}
	}
	setList(codecA.addr)
	gw := startWithAdmin(t, "gateway", true, "--store", store.addr, "--codec", "file://"+list, "--worker-refresh", "200ms")
	ctx := context.Background()
	c, err := client.Dial(ctx, gw.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// 64 MiB of float32, 1024 zstd chunks: more than gRPC's windows hold,
	// so that the gateway decodes at the pace of the client.
	const rows, cols, chunk = 4096, 4096, 128
	a, err := c.CreateArray(ctx, "t", client.ArraySpec{Shape: []int64{rows, cols}, DataType: "float32", ChunkShape: []int64{chunk, chunk}})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]float32, rows*cols)
	for i := range data {
		data[i] = float32(math.Sin(float64(i)*1e-3) * 100)
	}
	if _, err := client.Write(ctx, a, nil, data); err != nil {
		t.Fatal(err)
	}
	if n := decodedChunks(t, codecB); n != 0 {
		t.Fatalf("worker B decoded %v chunks before it was listed", n)
	}

	// readSlowly reads the array block by block, calling at(n) after the
	// n-th block, and checks the values.
	readSlowly := func(at func(n int)) {
		t.Helper()
		_, blocks, err := a.Blocks(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]float32, rows*cols)
		n := 0
		for b, err := range blocks {
			if err != nil {
				t.Fatalf("the client saw an error after %d blocks: %v", n, err)
			}
			n++
			for r := range b.Shape[0] {
				for k := range b.Shape[1] {
					i := (b.Origin[0]+r)*cols + b.Origin[1] + k
					got[i] = math.Float32frombits(binary.LittleEndian.Uint32(b.Data[4*(r*b.Shape[1]+k):]))
				}
			}
			at(n)
			time.Sleep(5 * time.Millisecond) // the gateway waits for the client
		}
		for i := range got {
			if got[i] != data[i] {
				t.Fatalf("element %d = %v, want %v", i, got[i], data[i])
			}
		}
	}

	// B added mid-slab gets work from that slab.
	var added time.Time
	firstB := 0 // the block after which B was first seen to have decoded
	readSlowly(func(n int) {
		switch {
		case n == 100:
			setList(codecA.addr, codecB.addr)
			added = time.Now()
		case n > 100 && firstB == 0 && n%10 == 0:
			if decodedChunks(t, codecB) > 0 {
				firstB = n
				t.Logf("worker B decoded chunks %v after it was listed (by block %d of 1024)", time.Since(added).Round(time.Millisecond), n)
			}
		}
	})
	if firstB == 0 {
		t.Fatalf("worker B, listed after block 100, decoded no chunk of the slab in flight (A decoded %v)", decodedChunks(t, codecA))
	}

	// A removed mid-slab gets nothing once the gateway has left it.
	aGone := false
	var aAtGone float64
	readSlowly(func(n int) {
		switch {
		case n == 100:
			setList(codecB.addr)
		case n > 100 && !aGone && n%5 == 0:
			for k := range gw.scrape(t) {
				if strings.HasPrefix(k, "zarrgate_codec_worker_batches_in_flight{") && strings.Contains(k, codecA.addr) {
					return // the gateway still has a stream on A
				}
			}
			aGone, aAtGone = true, decodedChunks(t, codecA)
			t.Logf("the gateway left worker A by block %d of 1024", n)
			if n > 1000 {
				t.Fatalf("the gateway left worker A only at block %d: too late for the test to see it get no work", n)
			}
		}
	})
	if !aGone {
		t.Fatal("the gateway kept a stream on worker A to the end of the slab after A was removed from the list")
	}
	if n := decodedChunks(t, codecA); n != aAtGone {
		t.Fatalf("worker A decoded %v chunks after the gateway left it", n-aAtGone)
	}
	for _, bad := range []string{"retrying a store or codec call", "gRPC retried", "navailable", "UNAVAILABLE"} {
		if strings.Contains(gw.logs.String(), bad) {
			t.Errorf("the gateway logged %q:\n%s", bad, gw.logs.String())
		}
	}
}
