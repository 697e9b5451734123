package arrayserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/zarr"
)

// The fairness array: 1 GiB of float32, 16384² in 512² chunks of 1 MiB
// (1024 chunks), zstd-compressed. Every chunk holds the same encoded bytes
// (one chunk is encoded, then its stored value copied to every key), so
// that setting it up costs one encode, while every chunk read is still a
// real fetch and zstd decode of smooth data with noise.
const (
	fairN     = 16384
	fairChunk = 512
)

// fairGateway returns a gateway on a memory store holding the fairness
// array "big".
func fairGateway(t testing.TB, cfg gateway.Config) *gateway.Gateway {
	t.Helper()
	g := gateway.New(memory.New(), codecsvc.NewLocal(), cfg)
	if _, err := g.CreateArray(ctx, "big", gateway.ArraySpec{Shape: []int64{fairN, fairN}, DataType: "float32", ChunkShape: []int64{fairChunk, fairChunk}, Codecs: json.RawMessage(zstdBytes)}); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, fairChunk*fairChunk*4)
	for i := range fairChunk {
		for j := range fairChunk {
			v := float32(math.Sin(float64(i)*0.01)*1000 + math.Cos(float64(j)*0.02)*100 + float64((i*131+j*71)%17))
			binary.LittleEndian.PutUint32(data[(i*fairChunk+j)*4:], math.Float32bits(v))
		}
	}
	blk := gateway.Block{Origin: []int64{0, 0}, Shape: []int64{fairChunk, fairChunk}, Data: data}
	if _, err := g.WriteSlab(ctx, "big", []zarr.Range{{Start: 0, Stop: fairChunk, Step: 1}, {Start: 0, Stop: fairChunk, Step: 1}}, nextFrom([]gateway.Block{blk})); err != nil {
		t.Fatal(err)
	}
	enc, _, err := storesvc.ReadAll(ctx, g.Store(), "big/c/0/0")
	if err != nil {
		t.Fatal(err)
	}
	for i := range fairN / fairChunk {
		for j := range fairN / fairChunk {
			if _, err := g.Store().Set(ctx, fmt.Sprintf("big/c/%d/%d", i, j), bytes.NewReader(enc), storesvc.Condition{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return g
}

// serveClients serves g on loopback and returns n clients, each on its
// own connection (as separate client processes would be).
func serveClients(t testing.TB, g *gateway.Gateway, n int) []gatewayv1.ArrayServiceClient {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	NewServer(g).Register(srv)
	go srv.Serve(lis)
	var cs []gatewayv1.ArrayServiceClient
	var conns []*grpc.ClientConn
	for range n {
		cc, err := rpc.Dial(lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cc)
		cs = append(cs, gatewayv1.NewArrayServiceClient(cc))
	}
	t.Cleanup(func() {
		for _, cc := range conns {
			cc.Close()
		}
		srv.Stop()
	})
	return cs
}

// readAll reads a ReadSlab stream to its end and returns the data bytes
// it carried.
func readAll(ctx context.Context, c gatewayv1.ArrayServiceClient, req *gatewayv1.ReadSlabRequest) (int64, error) {
	rs, err := c.ReadSlab(ctx, req)
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		m, err := rs.Recv()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if b := m.GetBlock(); b != nil {
			n += int64(len(b.GetData()))
		}
	}
}

// smallReads reads a 256² window of one random chunk of "big" (one
// chunk fetched and decoded, 256 KiB sent) again and again until stop
// is closed or max reads are done, and returns each read's latency.
func smallReads(t testing.TB, c gatewayv1.ArrayServiceClient, r *rand.Rand, max int, stop <-chan struct{}) []time.Duration {
	var lat []time.Duration
	for len(lat) < max {
		select {
		case <-stop:
			return lat
		default:
		}
		ci, cj := r.Uint64N(fairN/fairChunk), r.Uint64N(fairN/fairChunk)
		i0, j0 := ci*fairChunk+r.Uint64N(fairChunk-256), cj*fairChunk+r.Uint64N(fairChunk-256)
		req := &gatewayv1.ReadSlabRequest{Path: "big", Selection: []*gatewayv1.Slice{{Start: i0, Stop: i0 + 256}, {Start: j0, Stop: j0 + 256}}}
		t0 := time.Now()
		n, err := readAll(ctx, c, req)
		d := time.Since(t0)
		if err != nil || n != 256*256*4 {
			t.Errorf("small read: %d bytes, %v", n, err)
			return lat
		}
		lat = append(lat, d)
	}
	return lat
}

// quantile is the q-quantile of ds (sorted in place).
func quantile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// BenchmarkFairSmallReads measures how a 1 GiB slab read by one client
// slows another client's stream of small reads (one chunk each, over
// gRPC): the small reads' p50 and p99 alone, then beside the slab, in the
// same run, and the slab's own MB/s alone and beside them. In "rpc" the
// slab streams over gRPC to a client in this process (its transport costs
// the same 2 cores); in "engine" it is read by the engine directly (a
// reader whose transport costs the gateway nothing, as through shared
// memory), so the gateway's CPU goes to chunk work alone.
//
//	go test -run '^$' -bench FairSmallReads -benchtime 1x ./gateway/arrayserver/
func BenchmarkFairSmallReads(b *testing.B) {
	g := fairGateway(b, gateway.Config{})
	cs := serveClients(b, g, 2)
	bigC, small := cs[0], cs[1]
	for _, mode := range []string{"rpc", "engine"} {
		readBig := func() (int64, error) {
			if mode == "rpc" {
				return readAll(ctx, bigC, &gatewayv1.ReadSlabRequest{Path: "big"})
			}
			var n int64
			err := g.ReadSlab(ctx, "big", nil, func(gateway.SlabInfo) error { return nil }, func(b gateway.Block) error { n += int64(len(b.Data)); return nil })
			return n, err
		}
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				r := rand.New(rand.NewPCG(1, 2))
				smallReads(b, small, r, 20, nil) // warm-up
				solo := smallReads(b, small, r, 300, nil)
				t0 := time.Now()
				if n, err := readBig(); err != nil || n != fairN*fairN*4 {
					b.Fatalf("big read: %d bytes, %v", n, err)
				}
				alone := time.Since(t0)
				stop := make(chan struct{})
				done := make(chan []time.Duration)
				go func() { done <- smallReads(b, small, r, math.MaxInt, stop) }()
				t0 = time.Now()
				n, err := readBig()
				beside := time.Since(t0)
				close(stop)
				loaded := <-done
				if err != nil || n != fairN*fairN*4 {
					b.Fatalf("big read: %d bytes, %v", n, err)
				}
				b.ReportMetric(float64(quantile(solo, 0.5).Microseconds()), "solo-p50-µs")
				b.ReportMetric(float64(quantile(solo, 0.99).Microseconds()), "solo-p99-µs")
				b.ReportMetric(float64(quantile(loaded, 0.5).Microseconds()), "loaded-p50-µs")
				b.ReportMetric(float64(quantile(loaded, 0.99).Microseconds()), "loaded-p99-µs")
				b.ReportMetric(float64(len(loaded)), "loaded-reads")
				b.ReportMetric(float64(n)/alone.Seconds()/1e6, "slab-alone-MB/s")
				b.ReportMetric(float64(n)/beside.Seconds()/1e6, "slab-beside-MB/s")
			}
		})
	}
}
