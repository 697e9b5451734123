package file

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zarrgate/zarrgate/storesvc"
)

// BenchmarkSetOneDirectory: writers Set values into one directory at
// once, as a WriteSlab's flushes do into a row of chunks (c/<row>/…): each
// rename happens under the directory's lock (commit.go).
//
//	go test -run '^$' -bench SetOneDirectory -benchtime 2000x ./storesvc/file/
func BenchmarkSetOneDirectory(b *testing.B) {
	for _, d := range []Durability{DurabilityNone, DurabilityFsync} {
		for _, writers := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/writers=%d", d, writers), func(b *testing.B) {
				s, err := New(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				s.SetDurability(d)
				ctx := context.Background()
				value := bytes.Repeat([]byte{7}, 64<<10)
				var next atomic.Int64
				var wg sync.WaitGroup
				b.SetBytes(int64(len(value)))
				b.ResetTimer()
				for range writers {
					wg.Go(func() {
						for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
							if _, err := s.Set(ctx, fmt.Sprintf("c/0/%d", i%256), bytes.NewReader(value), storesvc.Condition{}); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			})
		}
	}
}
