package gateway

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net"
	"sync/atomic"
	"testing"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/codecsvc/remote"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// countingListener counts the bytes read and written on the connections
// it accepts: what crosses the codec hop.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	return countingConn{c, l.n}, err
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// countingFetcher counts the bytes a worker reads from the store.
type countingFetcher struct {
	storeFetcher
	n *atomic.Int64
}

func (f countingFetcher) Fetch(ctx context.Context, refs []codec.Ref, max int64) ([][]byte, []bool, error) {
	vals, found, err := f.storeFetcher.Fetch(ctx, refs, max)
	for _, v := range vals {
		f.n.Add(int64(len(v)))
	}
	return vals, found, err
}

// wholeOnly hides the remote engine's selections: the offloaded path as it
// was, decoding every unit whole for the gateway to gather from.
type wholeOnly struct{ Codecs }

// BenchmarkWireBytes measures the bytes a read moves between tiers per
// decoded byte it delivers, for a 1024×1024 float32 array in 16 chunks of
// 256 KiB (zstd): full, strided (every 4th element of each dimension) and
// box ([128:896) in each dimension, edge chunks read in part) reads, with
// codecs embedded, offloaded decoding whole chunks, offloaded with
// selections, and worker-fetch (the worker reads the store: counted as
// worker-store-B/B, and its store reads as worker-store-reads/op: the
// ranges of a shard's inner chunks that follow each other are read as one),
// for unsharded chunks and for the same chunks as the inner chunks of 4
// shards (sharded-*). store-B/B is the encoded bytes read from the store (every
// read touches every chunk), codec-B/B what crossed the codec hop (TCP
// payload both ways, counted at the worker's socket).
func BenchmarkWireBytes(b *testing.B) {
	var hop atomic.Int64
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	codecsvc.NewServer(codecsvc.NewLocal()).Register(srv)
	go srv.Serve(countingListener{lis, &hop})
	defer srv.Stop()
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	rc := remote.New(cc)
	defer rc.Close()

	const side = 1024
	store := memory.New()
	setup := New(store, codecsvc.NewLocal(), Config{})
	spec := ArraySpec{Shape: []int64{side, side}, DataType: "float32", ChunkShape: []int64{256, 256},
		Codecs: json.RawMessage(`[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}]`)}
	if _, err := setup.CreateArray(ctx, "a", spec); err != nil {
		b.Fatal(err)
	}
	// The same chunks as inner chunks of 4 shards of 2×2.
	spec.ShardShape = []int64{512, 512}
	if _, err := setup.CreateArray(ctx, "s", spec); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, side*side*4)
	for i := range side * side {
		v := math.Float32bits(float32(math.Sin(float64(i)*0.001) * 1000))
		data[4*i], data[4*i+1], data[4*i+2], data[4*i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	full := zarr.FullSelection([]int64{side, side})
	stored := map[string]int64{}
	for _, path := range []string{"a", "s"} {
		if _, err := setup.WriteSlab(ctx, path, full, nextFrom([]Block{{Origin: []int64{0, 0}, Shape: []int64{side, side}, Data: data}})); err != nil {
			b.Fatal(err)
		}
		for k, err := range store.ListPrefix(ctx, path+"/c/") {
			if err != nil {
				b.Fatal(err)
			}
			obj, err := store.Get(ctx, k, storesvc.ByteRange{})
			if err != nil {
				b.Fatal(err)
			}
			stored[path] += obj.Length
			obj.Close()
		}
	}
	// A second worker, reading the store itself (worker-fetch), on its own
	// counted socket; its store reads are counted too.
	var fhop, fread, freads atomic.Int64
	flis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	fsrv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	fs := codecsvc.NewServer(codecsvc.NewLocal())
	fs.SetFetcher(countingFetcher{storeFetcher{store, &freads}, &fread})
	fs.Register(fsrv)
	go fsrv.Serve(countingListener{flis, &fhop})
	defer fsrv.Stop()
	fcc, err := rpc.Dial(flis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer fcc.Close()
	frc := remote.New(fcc)
	defer frc.Close()
	reads := []struct {
		name string
		sel  []zarr.Range
	}{
		{"full", full},
		{"strided", []zarr.Range{{Start: 0, Stop: side, Step: 4}, {Start: 0, Stop: side, Step: 4}}},
		{"box", []zarr.Range{{Start: 128, Stop: 896, Step: 1}, {Start: 128, Stop: 896, Step: 1}}},
	}
	engines := []struct {
		name  string
		e     Codecs
		fetch bool
	}{{"embedded", codecsvc.NewLocal(), false}, {"offloaded-whole", wholeOnly{rc}, false}, {"offloaded-selection", rc, false}, {"worker-fetch", frc, true}}
	for _, path := range []string{"a", "s"} {
		for _, r := range reads {
			name := r.name
			if path == "s" {
				name = "sharded-" + name
			}
			for _, e := range engines {
				b.Run(name+"/"+e.name, func(b *testing.B) {
					benchWireBytes(b, store, path, r.sel, e.e, e.fetch, stored[path], &hop, &fhop, &fread, &freads)
				})
			}
		}
	}
}

// benchWireBytes is one read of BenchmarkWireBytes: the array at path
// (stored bytes in its chunks or shards), read through sel with engine e.
func benchWireBytes(b *testing.B, store storesvc.Store, path string, sel []zarr.Range, e Codecs, fetch bool, stored int64, hop, fhop, fread, freads *atomic.Int64) {
	g := New(store, e, Config{WorkerFetch: fetch})
	var delivered int64
	hop.Store(0)
	fhop.Store(0)
	fread.Store(0)
	freads.Store(0)
	for range b.N {
		if err := g.ReadSlab(ctx, path, sel, func(SlabInfo) error { return nil }, func(bl Block) error {
			delivered += int64(len(bl.Data))
			bl.Free()
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	if fetch {
		b.ReportMetric(0, "store-B/B")
		b.ReportMetric(float64(fread.Load())/float64(delivered), "worker-store-B/B")
		b.ReportMetric(float64(freads.Load())/float64(b.N), "worker-store-reads/op")
		b.ReportMetric(float64(fhop.Load())/float64(delivered), "codec-B/B")
		b.ReportMetric(float64(fhop.Load())/float64(b.N)/16, "codec-B/chunk")
		return
	}
	b.ReportMetric(float64(b.N)*float64(stored)/float64(delivered), "store-B/B")
	b.ReportMetric(float64(hop.Load())/float64(delivered), "codec-B/B")
	if _, embedded := e.(*codecsvc.Local); !embedded {
		b.ReportMetric(float64(hop.Load())/float64(b.N)/16, "codec-B/chunk")
	}
}
