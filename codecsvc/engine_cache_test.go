package codecsvc

import (
	"fmt"
	"sync"
	"testing"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/zarr"
)

func chainSpec(i int) *codec.BatchSpec {
	return &codec.BatchSpec{
		Codecs:   []zarr.CodecSpec{{Name: "bytes", Configuration: []byte(`{"endian":"little"}`)}},
		Shape:    []int64{int64(i + 1)},
		DataType: zarr.MustDataType("int32"),
	}
}

// The chain cache keeps the most recently used chains at its bound: a
// chain in steady use survives any number of others, which the cache
// evicts one at a time instead of clearing itself.
func TestLocalChainCacheLRU(t *testing.T) {
	l := NewLocal()
	hot, err := l.Chain(chainSpec(0))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 3*maxChains; i++ {
		if _, err := l.Chain(chainSpec(i)); err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 { // use the hot one now and then
			if c, _ := l.Chain(chainSpec(0)); c != hot {
				t.Fatalf("after %d other chains: the chain in use was built again", i)
			}
		}
	}
	if n := l.chains.Len(); n != maxChains {
		t.Fatalf("%d chains cached, want the bound %d", n, maxChains)
	}
	if c, _ := l.Chain(chainSpec(0)); c != hot {
		t.Fatal("the chain in use was evicted")
	}
	// The one used least recently is gone, the newest stays.
	if l.chains.Contains(specKey(chainSpec(1))) {
		t.Error("the least recently used chain is still cached")
	}
	if !l.chains.Contains(specKey(chainSpec(3*maxChains - 1))) {
		t.Error("the newest chain is not cached")
	}
}

func TestLocalChainConcurrent(t *testing.T) {
	l := NewLocal()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				c, err := l.Chain(chainSpec((i * (g + 1)) % 300))
				if err != nil || c == nil {
					panic(fmt.Sprint(err))
				}
			}
		})
	}
	wg.Wait()
}
