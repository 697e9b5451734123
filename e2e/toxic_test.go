package e2e

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/zarrgate/zarrgate/client"
)

// A gateway reads through a faulty link to its store worker (toxiproxy, in
// process, on 127.0.0.1): first 200 ms of latency on every response, then
// half the connections stalled and reset by peer after 300 ms. The slab comes back complete and
// exact, and the client sees no error.
func TestScaleOutSurvivesFaultyLinks(t *testing.T) {
	root := t.TempDir()
	worker := startCommand(t, "store-worker", "--root", root)
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	srv.Metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	proxy := toxiproxy.NewProxy(srv, "store", "127.0.0.1:0", worker.addr)
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	defer proxy.Stop()
	gw := startCommand(t, "gateway", "--store", proxy.Listen)
	ctx := context.Background()
	c, err := client.Dial(ctx, gw.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const rows, cols = 4096, 4096 // 64 MiB of float32
	a, err := c.CreateArray(ctx, "t", client.ArraySpec{Shape: []int64{rows, cols}, DataType: "float32", ChunkShape: []int64{256, 256}})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]float32, rows*cols)
	for i := range data {
		data[i] = float32(math.Cos(float64(i) * 1e-3))
	}
	if _, err := client.Write(ctx, a, nil, data); err != nil {
		t.Fatal(err)
	}
	tctx := zerolog.Nop().WithContext(context.Background())
	check := func(t *testing.T, rctx context.Context) error {
		got, _, err := client.Read[float32](rctx, a, nil)
		if err != nil {
			return err
		}
		for i := range got {
			if got[i] != data[i] {
				t.Errorf("element %d = %v, want %v", i, got[i], data[i])
				return nil
			}
		}
		return nil
	}

	t.Run("latency", func(t *testing.T) {
		if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(`{"name":"latency","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":200}}`)); err != nil {
			t.Fatal(err)
		}
		defer proxy.Toxics.RemoveToxic(tctx, "latency")
		start := time.Now()
		if err := check(t, ctx); err != nil {
			t.Fatalf("the client saw an error through a slow link: %v", err)
		}
		if time.Since(start) < 200*time.Millisecond {
			t.Fatal("the read did not cross the slow link")
		}
	})

	// reset_peer swallows each connection's traffic until its timeout and
	// then resets it. Reads run back to back while, for half a second,
	// every connection to the store worker is stalled and reset.
	t.Run("reset", func(t *testing.T) {
		stop := make(chan struct{})
		errc := make(chan error, 1)
		reads := 0
		var slowest time.Duration
		go func() {
			defer close(errc)
			for {
				select {
				case <-stop:
					return
				default:
				}
				rctx, cancel := context.WithTimeout(ctx, time.Minute)
				t0 := time.Now()
				err := check(t, rctx)
				slowest = max(slowest, time.Since(t0))
				cancel()
				if err != nil {
					errc <- err
					return
				}
				reads++
			}
		}()
		time.Sleep(200 * time.Millisecond)
		if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(`{"name":"reset","type":"reset_peer","stream":"downstream","toxicity":1,"attributes":{"timeout":100}}`)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		proxy.Toxics.RemoveToxic(tctx, "reset")
		time.Sleep(700 * time.Millisecond)
		close(stop)
		if err := <-errc; err != nil {
			t.Fatalf("the client saw an error while the link reset connections: %v", err)
		}
		if reads < 1 {
			t.Fatal("no read completed around the faults")
		}
		if slowest < 100*time.Millisecond {
			t.Fatalf("no read waited through a stalled connection (slowest %v): the fault missed", slowest)
		}
		t.Logf("%d reads, the slowest %v", reads, slowest)
	})
}
