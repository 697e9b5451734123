package complevel

import (
	"bytes"
	"math"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// Encodes at every level, with and without a checksum, from many
// goroutines: each frame decodes to its input, at most MaxZstdEncoders
// encoders are ever alive, and the encoders of a level no longer used are
// let go for those in use.
func TestEncodeZstdPool(t *testing.T) {
	src := make([]byte, 64<<10)
	for i := range src {
		src[i] = byte(math.Sin(float64(i)*0.01)*100) ^ byte(i%7)
	}
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	p := encoders()
	var wg sync.WaitGroup
	var mu sync.Mutex
	maxLive := 0
	for g := range 8 {
		wg.Go(func() {
			for level := -5; level <= 12; level++ {
				crc := (level+g)%2 == 0
				out, err := EncodeZstd([]byte("prefix"), src, level, crc)
				if err != nil {
					t.Error(err)
					return
				}
				if !bytes.HasPrefix(out, []byte("prefix")) {
					t.Errorf("level %d: dst not appended to", level)
					return
				}
				got, err := dec.DecodeAll(out[len("prefix"):], nil)
				if err != nil || !bytes.Equal(got, src) {
					t.Errorf("level %d crc %v: round trip: %v", level, crc, err)
					return
				}
				p.mu.Lock()
				live := p.live
				p.mu.Unlock()
				mu.Lock()
				maxLive = max(maxLive, live)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if maxLive > MaxZstdEncoders {
		t.Fatalf("%d encoders alive at once, want at most %d", maxLive, MaxZstdEncoders)
	}
	p.mu.Lock()
	idle := 0
	for _, l := range p.idle {
		idle += len(l)
	}
	live := p.live
	p.mu.Unlock()
	if live != idle || live > MaxZstdEncoders {
		t.Fatalf("after the encodes: %d alive, %d idle; want equal and at most %d", live, idle, MaxZstdEncoders)
	}
}

// Encodes do not wait for each other while slots are free: as many
// encoders as slots can be held at once, of one level.
func TestZstdPoolHoldsSlotsAtOnce(t *testing.T) {
	p := &zstdPool{slots: make(chan struct{}, 3), idle: make(map[zstdKey][]*zstd.Encoder)}
	k := zstdKey{3, false}
	var held []*zstd.Encoder
	for range 3 {
		e, err := p.get(k)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, e)
	}
	if held[0] == held[1] || held[1] == held[2] {
		t.Fatal("one encoder handed to two holders")
	}
	for _, e := range held {
		p.put(k, e)
	}
	// A fourth kind, with three alive and idle: one is let go.
	e, err := p.get(zstdKey{19, true})
	if err != nil {
		t.Fatal(err)
	}
	p.put(zstdKey{19, true}, e)
	if p.live != 3 {
		t.Fatalf("%d alive, want 3", p.live)
	}
}

func TestZstdWindow(t *testing.T) {
	for _, c := range []struct{ level, want int }{{0, 2 << 20}, {3, 2 << 20}, {1, 512 << 10}, {-7, 512 << 10}, {9, 4 << 20}, {19, 8 << 20}, {22, 8 << 20}, {40, 8 << 20}} {
		if got := ZstdWindow(c.level); got != c.want {
			t.Errorf("ZstdWindow(%d) = %d, want %d", c.level, got, c.want)
		}
	}
}
