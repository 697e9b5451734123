package httpslab

import (
	"io"
	"math"
	"net/http"
	"syscall"
	"testing"
	"time"

	"encoding/binary"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/storesvc/file"
)

// BenchmarkSlab512MiB reads a 512 MiB float32 array (16384 × 8192, 256 ×
// 256 zstd chunks, on the file store in a temporary directory) whole,
// through the engine (ReadSlab, blocks dropped) and through the slab
// endpoint over loopback HTTP (.npy, body discarded by an in-process
// client), interleaved. cpu-ms/op is the process's user+system CPU per
// read (for HTTP: server and client).
//
//	go test -run '^$' -bench Slab512MiB -benchtime 3x -count 3 -timeout 30m ./gateway/httpslab/
func BenchmarkSlab512MiB(b *testing.B) {
	const rows, cols = 16384, 8192
	fs, err := file.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	g := gateway.New(fs, codecsvc.NewLocal(), gateway.Config{})
	if _, err := g.CreateArray(ctx, "a", gateway.ArraySpec{Format: gateway.FormatV3, Shape: []int64{rows, cols}, DataType: "float32", ChunkShape: []int64{256, 256}}); err != nil {
		b.Fatal(err)
	}
	// Write band by band: a smooth field that compresses like real data.
	const band = 256
	row := 0
	if _, err := g.WriteSlab(ctx, "a", nil, func() (gateway.Block, error) {
		if row == rows {
			return gateway.Block{}, io.EOF
		}
		data := make([]byte, 0, band*cols*4)
		for i := row; i < row+band; i++ {
			for j := range cols {
				data = binary.LittleEndian.AppendUint32(data, math.Float32bits(float32(math.Sin(float64(i)/300)*math.Cos(float64(j)/200))))
			}
		}
		blk := gateway.Block{Origin: []int64{int64(row), 0}, Shape: []int64{band, cols}, Data: data}
		row += band
		return blk, nil
	}); err != nil {
		b.Fatal(err)
	}
	size := int64(rows * cols * 4)
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	measure := func(b *testing.B, read func() int64) {
		b.SetBytes(size)
		read() // warm the page cache and the metadata
		b.ResetTimer()
		c0 := cpu()
		for range b.N {
			if n := read(); n < size {
				b.Fatalf("read %d bytes, want %d", n, size)
			}
		}
		b.ReportMetric(float64((cpu()-c0).Milliseconds())/float64(b.N), "cpu-ms/op")
	}
	b.Run("ReadSlab", func(b *testing.B) {
		measure(b, func() int64 {
			var n int64
			if err := g.ReadSlab(ctx, "a", nil, func(gateway.SlabInfo) error { return nil }, func(blk gateway.Block) error {
				n += int64(len(blk.Data))
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			return n
		})
	})
	for _, bb := range []struct {
		name  string
		bytes int64
	}{{"HTTP-npy-band16MiB", 16 << 20}, {"HTTP-npy-band64MiB", 64 << 20}} {
		srv := serve(b, g, Options{BandBytes: bb.bytes})
		b.Run(bb.name, func(b *testing.B) {
			measure(b, func() int64 {
				resp, err := http.Get(srv.URL + "/slab/a")
				if err != nil {
					b.Fatal(err)
				}
				defer resp.Body.Close()
				n, err := io.Copy(io.Discard, resp.Body)
				if err != nil || resp.StatusCode != 200 {
					b.Fatalf("%s: %v", resp.Status, err)
				}
				return n
			})
		})
	}
}
