package httpapi_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/internal/httpapi"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/storesvc/remote"
	"github.com/zarrgate/zarrgate/storesvc/storeserver"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWholeValueGet reads whole values of one file store over
// loopback, by HTTP GET /zarr/<key> and by gRPC StoreService.Get (the
// remote client), client and server in this process. It reports
// throughput, the median latency (p50-µs) and the process's CPU time per
// read (cpu-µs/op: client and server together).
func BenchmarkWholeValueGet(b *testing.B) {
	ctx := context.Background()
	fs, err := file.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	st := storesvc.Wrap(fs)
	defer st.Close()

	hs := httptest.NewServer(httpapi.New(st, httpapi.Options{}))
	defer hs.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	storeserver.New(st).Register(gs)
	go gs.Serve(lis)
	defer gs.Stop()
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	rs, err := remote.New(ctx, cc)
	if err != nil {
		b.Fatal(err)
	}

	for _, sz := range []struct {
		name string
		n    int
	}{{"4KiB", 4 << 10}, {"1MiB", 1 << 20}} {
		key := "v/" + sz.name
		if _, err := st.Set(ctx, key, bytes.NewReader(bytes.Repeat([]byte{7}, sz.n)), storesvc.Condition{}); err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 1<<20)
		for _, tr := range []struct {
			name string
			get  func() (int64, error)
		}{
			{"http", func() (int64, error) {
				resp, err := client.Get(hs.URL + "/zarr/" + key)
				if err != nil {
					return 0, err
				}
				defer resp.Body.Close()
				return io.CopyBuffer(io.Discard, onlyReader{resp.Body}, buf)
			}},
			{"grpc", func() (int64, error) {
				obj, err := rs.Get(ctx, key, storesvc.ByteRange{})
				if err != nil {
					return 0, err
				}
				defer obj.Close()
				return io.CopyBuffer(io.Discard, onlyReader{obj}, buf)
			}},
		} {
			b.Run(sz.name+"/"+tr.name, func(b *testing.B) {
				b.SetBytes(int64(sz.n))
				var lat []time.Duration
				cpu0 := cpuTime()
				for b.Loop() {
					t0 := time.Now()
					n, err := tr.get()
					if err != nil || n != int64(sz.n) {
						b.Fatalf("read %d bytes, %v", n, err)
					}
					lat = append(lat, time.Since(t0))
				}
				cpu := cpuTime() - cpu0
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
				b.ReportMetric(float64(cpu.Microseconds())/float64(len(lat)), "cpu-µs/op")
			})
		}
	}
}

// onlyReader hides WriterTo/ReaderFrom so that CopyBuffer uses our buffer.
type onlyReader struct{ io.Reader }
