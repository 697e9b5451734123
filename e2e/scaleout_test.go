package e2e

import (
	"context"
	"math"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/client"
)

// A gateway over 2 store workers (one directory) and 3 codec workers. A
// 256 MiB ReadSlab runs while one codec worker and then one store worker
// are killed with SIGKILL: the read completes with the right values and
// the client sees no error. Then a WriteSlab runs while another codec
// worker dies: every chunk is written, none torn.
func TestScaleOutSurvivesWorkerLoss(t *testing.T) {
	root := t.TempDir()
	stores := []*server{startCommand(t, "store-worker", "--root", root), startCommand(t, "store-worker", "--root", root)}
	codecs := []*server{startCommand(t, "codec-worker"), startCommand(t, "codec-worker"), startCommand(t, "codec-worker")}
	addrs := func(ss []*server) string {
		var a []string
		for _, s := range ss {
			a = append(a, s.addr)
		}
		return strings.Join(a, ",")
	}
	gw := startCommand(t, "gateway", "--store", addrs(stores), "--codec", addrs(codecs))
	ctx := context.Background()
	c, err := client.Dial(ctx, gw.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const rows, cols = 8192, 8192 // 256 MiB of float32
	a, err := c.CreateArray(ctx, "t", client.ArraySpec{Shape: []int64{rows, cols}, DataType: "float32", ChunkShape: []int64{256, 256}})
	if err != nil {
		t.Fatal(err)
	}
	value := func(i int) float32 { return float32(math.Sin(float64(i)*1e-4) * 100) }
	data := make([]float32, rows*cols)
	for i := range data {
		data[i] = value(i)
	}
	if _, err := client.Write(ctx, a, nil, data); err != nil {
		t.Fatal(err)
	}

	// Read, killing workers as blocks arrive.
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
		switch n {
		case 50:
			codecs[0].cmd.Process.Signal(syscall.SIGKILL)
		case 400:
			stores[0].cmd.Process.Signal(syscall.SIGKILL)
		}
		for r := range b.Shape[0] {
			for k := range b.Shape[1] {
				i := (b.Origin[0]+r)*cols + b.Origin[1] + k
				off := 4 * (r*b.Shape[1] + k)
				got[i] = math.Float32frombits(uint32(b.Data[off]) | uint32(b.Data[off+1])<<8 | uint32(b.Data[off+2])<<16 | uint32(b.Data[off+3])<<24)
			}
		}
	}
	if n < 400 {
		t.Fatalf("only %d blocks: the kills did not happen mid-read", n)
	}
	for i := range got {
		if got[i] != data[i] {
			t.Fatalf("element %d = %v, want %v after worker loss", i, got[i], data[i])
		}
	}

	// Write while another codec worker dies.
	for i := range data {
		data[i] = -data[i]
	}
	done := make(chan error, 1)
	go func() {
		_, err := client.Write(ctx, a, nil, data)
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the 256 MiB write finished within 300ms (%v): the kill would not be mid-write", err)
	default:
	}
	codecs[1].cmd.Process.Signal(syscall.SIGKILL)
	if err := <-done; err != nil {
		t.Fatalf("write during codec worker loss: %v", err)
	}
	back, _, err := client.Read[float32](ctx, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range back {
		if back[i] != data[i] {
			t.Fatalf("element %d = %v after the write, want %v: a chunk was lost or torn", i, back[i], data[i])
		}
	}
}

// A store worker that goes away and comes back on its address is used
// again: the gateway's calls wait for it (within their deadline) and then
// succeed.
func TestWorkerComesBack(t *testing.T) {
	root := t.TempDir()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	worker := startCommand(t, "store-worker", "--root", root, "--listen", addr)
	gw := startCommand(t, "gateway", "--store", addr)
	ctx := context.Background()
	c, err := client.Dial(ctx, gw.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := c.CreateArray(ctx, "a", client.ArraySpec{Shape: []int64{100}, DataType: "int32"})
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]int32, 100)
	for i := range vals {
		vals[i] = int32(i * i)
	}
	if _, err := client.Write(ctx, a, nil, vals); err != nil {
		t.Fatal(err)
	}
	worker.cmd.Process.Signal(syscall.SIGKILL)
	<-worker.done
	// While it is gone, a read with a short deadline fails with the
	// deadline, not with a wrong answer.
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, _, err = client.Read[int32](short, a, nil)
	cancel()
	if err == nil {
		t.Fatal("a read succeeded with the only store worker dead")
	}
	startCommand(t, "store-worker", "--root", root, "--listen", addr)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, _, err := client.Read[int32](rctx, a, nil)
	if err != nil {
		t.Fatalf("after the worker came back: %v", err)
	}
	for i := range got {
		if got[i] != vals[i] {
			t.Fatalf("element %d = %d", i, got[i])
		}
	}
}
