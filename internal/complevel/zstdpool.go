package complevel

import (
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// zstdWindowLog is libzstd's window log per level for inputs of unknown
// or large size (ZSTD_defaultCParameters[0], levels 0..22; 0 is the
// base of the negative levels).
var zstdWindowLog = [23]uint8{19, 19, 20, 21, 21, 21, 21, 21, 21, 22, 22, 22, 22, 22, 22, 22, 22, 23, 23, 23, 25, 26, 27}

// ZstdWindow is the encoder window for a libzstd level: libzstd's own,
// at most klauspost's default of 8 MiB. A chunk no larger than it is
// encoded as one segment, whatever the window; the window sizes the
// encoder's history buffer (about 3× the window per encoder), so
// libzstd's 2 MiB at level 3 instead of the 8 MiB default takes an
// encoder from 18 to 6 MiB.
func ZstdWindow(level int) int {
	if level == 0 {
		level = ZstdDefault
	}
	wlog := zstdWindowLog[0]
	if level > 0 {
		wlog = zstdWindowLog[min(level, 22)]
	}
	return min(1<<wlog, 8<<20)
}

// MaxZstdEncoders bounds the zstd encoders alive in the process, across
// levels: min(GOMAXPROCS, 8). Each is 6–18 MiB (ZstdWindow), outside the
// memory budget, so the bound is what keeps a caller writing at every
// level from growing the process (docs/limits.md).
var MaxZstdEncoders = min(runtime.GOMAXPROCS(0), 8)

type zstdKey struct {
	level int
	crc   bool
}

// zstdPool holds encoders of one state each (WithEncoderConcurrency(1)),
// by level and checksum. At most max are alive, so at most max encode
// at once: an encode waits for a slot, takes an idle encoder of its kind
// or makes one, dropping an idle one of another kind when max are alive
// (one always is: every encoder in use holds a slot, and the caller
// holds one too).
type zstdPool struct {
	slots chan struct{}
	mu    sync.Mutex
	idle  map[zstdKey][]*zstd.Encoder
	live  int
}

var encoders = sync.OnceValue(func() *zstdPool {
	return &zstdPool{slots: make(chan struct{}, MaxZstdEncoders), idle: make(map[zstdKey][]*zstd.Encoder)}
})

func (p *zstdPool) get(k zstdKey) (*zstd.Encoder, error) {
	p.slots <- struct{}{}
	p.mu.Lock()
	if l := p.idle[k]; len(l) > 0 {
		e := l[len(l)-1]
		l[len(l)-1] = nil
		p.idle[k] = l[:len(l)-1]
		p.mu.Unlock()
		return e, nil
	}
	if p.live == cap(p.slots) {
		p.dropIdleLocked()
	}
	p.live++
	p.mu.Unlock()
	e, err := zstd.NewWriter(nil, append(ZstdOptions(k.level),
		zstd.WithWindowSize(ZstdWindow(k.level)), zstd.WithEncoderCRC(k.crc),
		zstd.WithEncoderConcurrency(1), zstd.WithZeroFrames(true))...)
	if err != nil {
		p.mu.Lock()
		p.live--
		p.mu.Unlock()
		<-p.slots
		return nil, err
	}
	return e, nil
}

// dropIdleLocked lets one idle encoder go (to the garbage collector).
func (p *zstdPool) dropIdleLocked() {
	for k, l := range p.idle {
		if len(l) == 0 {
			continue
		}
		l[len(l)-1] = nil
		if len(l) == 1 {
			delete(p.idle, k)
		} else {
			p.idle[k] = l[:len(l)-1]
		}
		p.live--
		return
	}
}

func (p *zstdPool) put(k zstdKey, e *zstd.Encoder) {
	p.mu.Lock()
	p.idle[k] = append(p.idle[k], e)
	p.mu.Unlock()
	<-p.slots
}

// CAppendZstd, set by the cgocodecs build (codecsvc/compress_cgo.go),
// appends one frame of src encoded by libzstd at a level to dst. When
// set, EncodeZstd uses it instead of the pool below: Blosc's zstd blocks
// then compress as c-blosc's do (docs/benchmarks.md, target 6).
var CAppendZstd func(dst, src []byte, level int, crc bool) ([]byte, error)

// EncodeZstd appends one zstd frame of src at a libzstd level (0:
// ZstdDefault), with a content checksum if crc, to dst. Encodes run on
// pooled encoders, at most MaxZstdEncoders at once across the process:
// one encoder per call would cost its 6–18 MiB of state each time, and
// one shared encoder would run every encode one after the other.
func EncodeZstd(dst, src []byte, level int, crc bool) ([]byte, error) {
	if CAppendZstd != nil {
		return CAppendZstd(dst, src, level, crc)
	}
	p := encoders()
	k := zstdKey{level, crc}
	e, err := p.get(k)
	if err != nil {
		return nil, err
	}
	defer p.put(k, e)
	return e.EncodeAll(src, dst), nil
}
