// Package blosc is a Go implementation of the Blosc v1 container format
// as written by c-blosc 1.x (and therefore by numcodecs and zarr-python).
// It needs no cgo. On amd64, assembly kernels (SSE2, or AVX2 where the CPU
// has it) do the byte shuffles of typesizes 2, 4 and 8 and the bit
// shuffle's transposes; the purego build tag leaves them out, and other
// typesizes and architectures use the Go code.
//
// # Frame layout
//
// A frame starts with a 16-byte header, all integers little-endian:
//
//	byte 0     format version (2)
//	byte 1     version of the inner codec's format (1 for every codec)
//	byte 2     flags:
//	             0x01 byte shuffle
//	             0x02 memcpyed: the data follow the header uncompressed
//	             0x04 bit shuffle
//	             0x08 reserved; c-blosc 1.x rejects frames that set it
//	             0x10 "don't split": each block is a single stream
//	             bits 5-7 inner codec: 0 blosclz, 1 lz4/lz4hc, 2 snappy,
//	             3 zlib, 4 zstd
//	byte 3     typesize (1..255)
//	bytes 4-7  nbytes, the decoded size
//	bytes 8-11 blocksize
//	bytes 12-15 cbytes, the size of the whole frame
//
// Unless the frame is memcpyed, the header is followed by one int32 per
// block, the offset of the block within the frame (bstarts), and then the
// blocks. The data is cut into blocks of blocksize bytes; the last block
// holds the remainder (the leftover block). A block is stored as one stream,
// or as typesize streams of blocksize/typesize bytes each when the frame does
// not set "don't split", typesize <= 16, blocksize/typesize >= 128 and the
// block is not the leftover block. Each stream is an int32 compressed size
// followed by that many bytes; a stream whose compressed size equals its
// decoded size is stored raw. Shuffles apply to whole blocks, before
// splitting.
package blosc

import (
	"bytes"
	"encoding/binary"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/zarrgate/zarrgate/errs"
)

// Shuffle selects the filter applied to each block before compression.
type Shuffle int

// Shuffle modes, numbered as in c-blosc and Zarr v2 metadata.
const (
	NoShuffle   Shuffle = 0
	ByteShuffle Shuffle = 1
	BitShuffle  Shuffle = 2
)

// Options configure Compress.
type Options struct {
	// Cname is the inner codec: "blosclz", "lz4", "lz4hc", "zstd", "zlib"
	// or "snappy".
	Cname string
	// Clevel is 0 (store uncompressed) to 9 (best compression).
	Clevel int
	// Shuffle is the filter applied to each block.
	Shuffle Shuffle
	// Typesize is the element size in bytes, the shuffle stride. Values
	// above 255 are treated as 1, as c-blosc does.
	Typesize int
	// Blocksize forces a block size in bytes; 0 chooses one the way c-blosc
	// does.
	Blocksize int
}

// Format constants.
const (
	// HeaderSize is the size of the fixed frame header, and the most a frame
	// can exceed its decoded size by.
	HeaderSize = 16

	formatVersion = 2
	codecVersion  = 1

	flagShuffle    = 0x01
	flagMemcpyed   = 0x02
	flagBitShuffle = 0x04
	flagReserved   = 0x08
	flagDontSplit  = 0x10

	minBufferSize = 128 // frames smaller than this are stored memcpyed
	maxSplits     = 16  // largest typesize for which blocks are split
	maxTypesize   = 255
	maxBlocksize  = (math.MaxInt32 - maxTypesize*4) / 3
	maxBuffersize = math.MaxInt32 - HeaderSize
	l1            = 32 * 1024
)

// Inner codec identifiers as stored in flag bits 5-7.
const (
	formatBlosclz = 0
	formatLZ4     = 1
	formatSnappy  = 2
	formatZlib    = 3
	formatZstd    = 4
)

type codec struct {
	name   string
	format int
	hcr    bool // "high compression ratio" codec: c-blosc doubles its blocks
}

var codecs = map[string]codec{
	"blosclz": {"blosclz", formatBlosclz, false},
	"lz4":     {"lz4", formatLZ4, false},
	"lz4hc":   {"lz4hc", formatLZ4, true},
	"snappy":  {"snappy", formatSnappy, false},
	"zlib":    {"zlib", formatZlib, true},
	"zstd":    {"zstd", formatZstd, true},
}

// header is the decoded fixed header of a frame.
type header struct {
	version, versionlz byte
	flags              byte
	typesize           int
	nbytes             int
	blocksize          int
	cbytes             int
}

func parseHeader(src []byte) (header, error) {
	if len(src) < HeaderSize {
		return header{}, errs.New(errs.DataLoss, "blosc: frame of %d bytes is shorter than its %d-byte header", len(src), HeaderSize)
	}
	h := header{
		version:   src[0],
		versionlz: src[1],
		flags:     src[2],
		typesize:  int(src[3]),
		nbytes:    int(int32(binary.LittleEndian.Uint32(src[4:]))),
		blocksize: int(int32(binary.LittleEndian.Uint32(src[8:]))),
		cbytes:    int(int32(binary.LittleEndian.Uint32(src[12:]))),
	}
	if h.nbytes < 0 || h.blocksize < 0 || h.cbytes < 0 {
		return header{}, errs.New(errs.DataLoss, "blosc: corrupt header (negative size)")
	}
	return h, nil
}

// Info returns the decoded size, the frame size and the block size recorded
// in a frame's header. It checks only that the header is present.
func Info(src []byte) (nbytes, cbytes, blocksize int, err error) {
	h, err := parseHeader(src)
	if err != nil {
		return 0, 0, 0, err
	}
	return h.nbytes, h.cbytes, h.blocksize, nil
}

// layout is a validated frame, ready to decode.
type layout struct {
	header
	nblocks  int
	leftover int
	frame    []byte // src[:cbytes]
	decode   streamDecoder
}

// check validates a header against the frame it came from, the way c-blosc
// does before decoding, plus the bounds c-blosc leaves to luck.
func (h header) check(src []byte) (layout, error) {
	l := layout{header: h}
	if h.cbytes < HeaderSize || h.cbytes > len(src) {
		return l, errs.New(errs.DataLoss, "blosc: frame claims %d bytes but %d are present", h.cbytes, len(src))
	}
	l.frame = src[:h.cbytes]
	if h.nbytes == 0 {
		return l, nil
	}
	if h.version != formatVersion {
		return l, errs.New(errs.DataLoss, "blosc: unsupported format version %d", h.version)
	}
	if h.flags&flagReserved != 0 {
		return l, errs.New(errs.DataLoss, "blosc: frame sets reserved flag bits (%#x)", h.flags)
	}
	if h.typesize == 0 {
		return l, errs.New(errs.DataLoss, "blosc: corrupt header (typesize 0)")
	}
	if h.blocksize == 0 || h.blocksize > maxBlocksize {
		return l, errs.New(errs.DataLoss, "blosc: corrupt header (blocksize %d)", h.blocksize)
	}
	l.nblocks = h.nbytes / h.blocksize
	l.leftover = h.nbytes % h.blocksize
	if l.leftover > 0 {
		l.nblocks++
	}
	if h.flags&flagMemcpyed != 0 {
		if h.cbytes != h.nbytes+HeaderSize {
			return l, errs.New(errs.DataLoss, "blosc: memcpyed frame of %d bytes holds %d data bytes", h.cbytes, h.nbytes)
		}
		return l, nil
	}
	if h.versionlz != codecVersion {
		return l, errs.New(errs.DataLoss, "blosc: unsupported codec format version %d", h.versionlz)
	}
	dec, ok := streamDecoders[int(h.flags>>5)]
	if !ok {
		return l, errs.New(errs.DataLoss, "blosc: unknown codec %d in header", h.flags>>5)
	}
	l.decode = dec
	if l.nblocks > (h.cbytes-HeaderSize)/4 {
		return l, errs.New(errs.DataLoss, "blosc: frame of %d bytes too short for %d block offsets", h.cbytes, l.nblocks)
	}
	return l, l.plausible()
}

// maxRatio bounds each inner codec's compression ratio: a stream of n
// bytes decodes to at most ratio*n + maxRatioSlack bytes. LZ4 and BloscLZ
// code at most 255 bytes of match per input byte, Snappy at most 64 per
// 3-byte copy, DEFLATE 258 per 2 bits, and a zstd block of at least 4
// bytes (an RLE block) decodes to at most 128 KiB.
var maxRatio = map[int]int64{
	formatBlosclz: 256,
	formatLZ4:     256,
	formatSnappy:  32,
	formatZlib:    1032,
	formatZstd:    32 << 10,
}

const maxRatioSlack = 128 << 10

// stream reads the header of block j's stream at off: where its bytes
// start and how many there are, checked to lie inside the frame.
func (l *layout) stream(j, off int) (start, n int, err error) {
	if off < HeaderSize || off > len(l.frame)-4 {
		return 0, 0, errs.New(errs.DataLoss, "blosc: block %d: stream offset %d outside the %d-byte frame", j, off, len(l.frame))
	}
	n = int(int32(binary.LittleEndian.Uint32(l.frame[off:])))
	off += 4
	if n < 0 || n > len(l.frame)-off {
		return 0, 0, errs.New(errs.DataLoss, "blosc: block %d: stream of %d bytes overruns the frame", j, n)
	}
	return off, n, nil
}

// plausible checks, from the block offsets and stream sizes alone and
// before anything is allocated, that the frame's streams can hold the
// decoded size its header claims: every stream lies in the frame, the
// streams do not share bytes (c-blosc writes them one after the other),
// and each block's streams can decode to the block at the inner codec's
// best ratio. A header claiming a large size for a few bytes of streams
// is refused here instead of sizing the output and scratch buffers.
func (l *layout) plausible() error {
	ratio := maxRatio[int(l.flags>>5)]
	var used int64
	for j := 0; j < l.nblocks; j++ {
		bsize := l.blocksize
		leftover := j == l.nblocks-1 && l.leftover > 0
		if leftover {
			bsize = l.leftover
		}
		off := int(int32(binary.LittleEndian.Uint32(l.frame[HeaderSize+4*j:])))
		nsplits := splits(l.flags, l.typesize, bsize, leftover)
		neblock := bsize / nsplits
		var most int64
		for k := 0; k < nsplits; k++ {
			var cb int
			var err error
			if off, cb, err = l.stream(j, off); err != nil {
				return err
			}
			if cb == neblock {
				most += int64(cb) // stored raw
			} else {
				most += ratio*int64(cb) + maxRatioSlack
			}
			used += 4 + int64(cb)
			off += cb
		}
		if most < int64(neblock*nsplits) {
			return errs.New(errs.DataLoss, "blosc: block %d of %d bytes: its streams can hold at most %d", j, bsize, most)
		}
	}
	if payload := int64(len(l.frame) - HeaderSize - 4*l.nblocks); used > payload {
		return errs.New(errs.DataLoss, "blosc: the blocks' streams (%d bytes) overlap in the %d bytes that hold them", used, payload)
	}
	return nil
}

// Decompress decodes a blosc frame. It never allocates more than maxSize bytes of output
// (the expected decoded chunk size): a header claiming more is an error, not an allocation.
func Decompress(src []byte, maxSize int) ([]byte, error) {
	return DecompressWith(src, maxSize, func(n int) []byte { return make([]byte, n) })
}

// DecompressWith is Decompress with the output buffer from alloc, called
// once the frame is checked, with the decoded size, and only then. alloc
// must return at least n bytes, whose contents do not matter: on success
// every one of the first n is written, and those are returned.
func DecompressWith(src []byte, maxSize int, alloc func(n int) []byte) ([]byte, error) {
	if maxSize < 0 {
		return nil, errs.New(errs.InvalidArgument, "blosc: negative maxSize %d", maxSize)
	}
	h, err := parseHeader(src)
	if err != nil {
		return nil, err
	}
	if h.nbytes > maxSize {
		return nil, errs.New(errs.DataLoss, "blosc: frame decodes to %d bytes, more than the %d expected", h.nbytes, maxSize)
	}
	l, err := h.check(src)
	if err != nil {
		return nil, err
	}
	dst := alloc(h.nbytes)[:h.nbytes]
	if err := l.decodeInto(dst); err != nil {
		return nil, err
	}
	return dst, nil
}

// DecompressInto decodes a blosc frame into dst and returns the number of
// bytes written. It fails, without writing, if the frame decodes to more than
// len(dst) bytes.
func DecompressInto(dst, src []byte) (int, error) {
	h, err := parseHeader(src)
	if err != nil {
		return 0, err
	}
	if h.nbytes > len(dst) {
		return 0, errs.New(errs.DataLoss, "blosc: frame decodes to %d bytes, more than the %d-byte destination", h.nbytes, len(dst))
	}
	l, err := h.check(src)
	if err != nil {
		return 0, err
	}
	if err := l.decodeInto(dst[:h.nbytes]); err != nil {
		return 0, err
	}
	return h.nbytes, nil
}

// scratch holds the per-goroutine buffers of block decoding and encoding.
type scratch struct {
	tmp, tmp2 []byte
}

var scratchPool sync.Pool

func getScratch(n int) *scratch {
	s, _ := scratchPool.Get().(*scratch)
	if s == nil {
		s = &scratch{}
	}
	if cap(s.tmp) < n {
		s.tmp = make([]byte, n)
		s.tmp2 = make([]byte, n)
	}
	s.tmp, s.tmp2 = s.tmp[:n], s.tmp2[:n]
	return s
}

func putScratch(s *scratch) {
	// Blocks above 4 MiB are unusual; don't pin their buffers.
	if cap(s.tmp) <= 4<<20 {
		scratchPool.Put(s)
	}
}

// parallelMin is the smallest frame decoded (or encoded) by several
// goroutines; below it the goroutine handoff costs more than it saves.
const (
	parallelMinBlocks = 4
	parallelMinBytes  = 256 << 10
)

func workers(nblocks, nbytes int) int {
	if nblocks < parallelMinBlocks || nbytes < parallelMinBytes {
		return 1
	}
	return min(runtime.GOMAXPROCS(0), nblocks, 8)
}

func (l *layout) decodeInto(dst []byte) error {
	if l.nbytes == 0 {
		return nil
	}
	if l.flags&flagMemcpyed != 0 {
		copy(dst, l.frame[HeaderSize:])
		return nil
	}
	n := workers(l.nblocks, l.nbytes)
	// Scratch space for the largest block actually present: a header may
	// claim blocks far larger than the content (at most 2 GiB).
	scratchSize := min(l.blocksize, l.nbytes)
	if n == 1 {
		s := getScratch(scratchSize)
		defer putScratch(s)
		for j := 0; j < l.nblocks; j++ {
			if err := l.decodeBlock(j, dst, s); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		next    atomic.Int64
		failed  atomic.Bool
		errOnce sync.Once
		first   error
		wg      sync.WaitGroup
	)
	for range n {
		wg.Go(func() {
			s := getScratch(scratchSize)
			defer putScratch(s)
			for !failed.Load() {
				j := int(next.Add(1) - 1)
				if j >= l.nblocks {
					return
				}
				if err := l.decodeBlock(j, dst, s); err != nil {
					errOnce.Do(func() { first = err })
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// splits reports how many streams a block of bsize bytes is stored as. The
// typesize and size conditions keep frames written before the "don't split"
// flag existed readable, as c-blosc's decoder does.
func splits(flags byte, typesize, bsize int, leftover bool) int {
	if flags&flagDontSplit == 0 && typesize <= maxSplits && bsize/typesize >= minBufferSize && !leftover {
		return typesize
	}
	return 1
}

func (l *layout) decodeBlock(j int, dst []byte, s *scratch) error {
	bsize := l.blocksize
	leftover := j == l.nblocks-1 && l.leftover > 0
	if leftover {
		bsize = l.leftover
	}
	out := dst[j*l.blocksize : j*l.blocksize+bsize]
	doShuffle := l.flags&flagShuffle != 0 && l.typesize > 1
	doBitShuffle := !doShuffle && l.flags&flagBitShuffle != 0 && bsize >= l.typesize
	target := out
	if doShuffle || doBitShuffle {
		target = s.tmp[:bsize]
	}
	off := int(int32(binary.LittleEndian.Uint32(l.frame[HeaderSize+4*j:])))
	nsplits := splits(l.flags, l.typesize, bsize, leftover)
	neblock := bsize / nsplits
	// Raw streams feed the unshuffle straight from the frame: with a split
	// block each stream is one plane; unsplit, the stream is the whole block.
	planeWise := doShuffle && nsplits > 1
	var planeBuf [maxSplits][]byte
	planes := planeBuf[:0]
	source := target
	for k := 0; k < nsplits; k++ {
		var cb int
		var err error
		if off, cb, err = l.stream(j, off); err != nil {
			return err
		}
		in := l.frame[off : off+cb]
		o := target[k*neblock : (k+1)*neblock]
		switch {
		case cb != neblock:
			if err := l.decode(in, o); err != nil {
				return errs.Wrap(errs.DataLoss, err, "blosc: block %d stream %d: %v", j, k, err)
			}
			planes = append(planes, o)
		case planeWise:
			planes = append(planes, in)
		case nsplits == 1 && (doShuffle || doBitShuffle):
			source = in
		default:
			copy(o, in)
		}
		off += cb
	}
	// Only a corrupt header (blocksize not a multiple of typesize) leaves
	// bytes that no stream covers; don't let them carry stale data.
	nb := neblock * nsplits
	clear(target[nb:])
	switch {
	case planeWise:
		unshufflePlanes(planes, out[:nb])
		clear(out[nb:])
	case doShuffle:
		unshuffle(l.typesize, source, out)
	case doBitShuffle:
		bitunshuffle(l.typesize, source, out, s.tmp2[:bsize])
	}
	return nil
}

// computeBlocksize chooses a block size the way c-blosc 1.21 does, so that
// our frames look like the ones numcodecs writes.
func computeBlocksize(c codec, clevel, typesize, nbytes, forced int) int {
	if nbytes < typesize {
		return 1
	}
	bs := nbytes
	if forced > 0 {
		bs = max(min(forced, maxBlocksize), minBufferSize)
	} else if nbytes >= l1 {
		bs = l1
		if c.hcr {
			bs *= 2
		}
		switch clevel {
		case 0:
			bs /= 4
		case 1:
			bs /= 2
		case 2:
		case 3:
			bs *= 2
		case 4, 5:
			bs *= 4
		case 6, 7, 8:
			bs *= 8
		case 9:
			bs *= 8
			if c.hcr {
				bs *= 2
			}
		}
	}
	if clevel > 0 && splitBlock(c, typesize, bs) {
		bs = min(bs, 1<<18)
		bs *= typesize
		bs = max(bs, 1<<16)
		bs = min(bs, 1<<20)
	}
	bs = min(bs, nbytes)
	if bs > typesize {
		bs = bs / typesize * typesize
	}
	return bs
}

// splitBlock is c-blosc's default ("forward compatible") split rule: split
// blocks into typesize streams for every codec but zstd.
func splitBlock(c codec, typesize, blocksize int) bool {
	return c.format != formatZstd && typesize <= maxSplits && blocksize/typesize >= minBufferSize
}

// Compress encodes src as a blosc frame. The frame is at most
// len(src)+HeaderSize bytes: data that doesn't compress is stored memcpyed.
func Compress(src []byte, o Options) ([]byte, error) {
	c, ok := codecs[o.Cname]
	if !ok {
		return nil, errs.New(errs.InvalidArgument, "blosc: unknown cname %q", o.Cname)
	}
	if o.Clevel < 0 || o.Clevel > 9 {
		return nil, errs.New(errs.InvalidArgument, "blosc: clevel %d outside 0..9", o.Clevel)
	}
	if o.Shuffle < NoShuffle || o.Shuffle > BitShuffle {
		return nil, errs.New(errs.InvalidArgument, "blosc: unknown shuffle %d", o.Shuffle)
	}
	if o.Typesize <= 0 {
		return nil, errs.New(errs.InvalidArgument, "blosc: typesize %d must be positive", o.Typesize)
	}
	if o.Blocksize < 0 {
		return nil, errs.New(errs.InvalidArgument, "blosc: negative blocksize %d", o.Blocksize)
	}
	if len(src) > maxBuffersize {
		return nil, errs.New(errs.InvalidArgument, "blosc: %d bytes is more than blosc can hold", len(src))
	}
	typesize := o.Typesize
	if typesize > maxTypesize {
		typesize = 1
	}
	nbytes := len(src)
	bs := computeBlocksize(c, o.Clevel, typesize, nbytes, o.Blocksize)
	nblocks, leftover := nbytes/bs, nbytes%bs
	if leftover > 0 {
		nblocks++
	}

	flags := byte(c.format << 5)
	switch o.Shuffle {
	case ByteShuffle:
		flags |= flagShuffle
	case BitShuffle:
		flags |= flagBitShuffle
	}
	if !splitBlock(c, typesize, bs) {
		flags |= flagDontSplit
	}
	maxbytes := nbytes + HeaderSize
	hdr := func(dst []byte, flags byte, cbytes int) {
		dst[0] = formatVersion
		dst[1] = codecVersion
		dst[2] = flags
		dst[3] = byte(typesize)
		binary.LittleEndian.PutUint32(dst[4:], uint32(nbytes))
		binary.LittleEndian.PutUint32(dst[8:], uint32(bs))
		binary.LittleEndian.PutUint32(dst[12:], uint32(cbytes))
	}
	memcpyed := func() []byte {
		var h [HeaderSize]byte
		hdr(h[:], flags|flagMemcpyed, maxbytes)
		// bytes.Join allocates without zeroing what it then fills.
		return bytes.Join([][]byte{h[:], src}, nil)
	}
	if o.Clevel == 0 || nbytes < minBufferSize {
		return memcpyed(), nil
	}

	enc := streamEncoders[c.name]
	blocks := make([][]byte, nblocks)
	encodeBlock := func(j int, s *scratch, out []byte) []byte {
		bsize := bs
		isLeftover := j == nblocks-1 && leftover > 0
		if isLeftover {
			bsize = leftover
		}
		in := src[j*bs : j*bs+bsize]
		switch {
		case o.Shuffle == ByteShuffle && typesize > 1:
			shuffle(typesize, in, s.tmp[:bsize])
			in = s.tmp[:bsize]
		case o.Shuffle == BitShuffle && bsize >= typesize:
			bitshuffle(typesize, in, s.tmp[:bsize], s.tmp2[:bsize])
			in = s.tmp[:bsize]
		}
		nsplits := 1
		if flags&flagDontSplit == 0 && !isLeftover {
			nsplits = typesize
		}
		neblock := bsize / nsplits
		if cap(out) < bsize+4*nsplits {
			out = make([]byte, 0, bsize+4*nsplits)
		}
		out = out[:0]
		for k := 0; k < nsplits; k++ {
			part := in[k*neblock : (k+1)*neblock]
			at := len(out)
			out = append(out, 0, 0, 0, 0)
			out = enc(out, part, o.Clevel, typesize)
			n := len(out) - at - 4
			if n <= 0 || n >= neblock {
				// Incompressible (or exactly as large): store raw, which a
				// size equal to the decoded size signals.
				out = append(out[:at+4], part...)
				n = neblock
			}
			binary.LittleEndian.PutUint32(out[at:], uint32(n))
		}
		return out
	}

	if n := workers(nblocks, nbytes); n == 1 {
		s := getScratch(bs)
		for j := range blocks {
			blocks[j] = encodeBlock(j, s, getBlockBuf())
		}
		putScratch(s)
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				s := getScratch(bs)
				defer putScratch(s)
				for {
					j := int(next.Add(1) - 1)
					if j >= nblocks {
						return
					}
					blocks[j] = encodeBlock(j, s, getBlockBuf())
				}
			})
		}
		wg.Wait()
	}

	defer func() {
		for _, b := range blocks {
			putBlockBuf(b)
		}
	}()
	total := HeaderSize + 4*nblocks
	for _, b := range blocks {
		total += len(b)
	}
	if total > maxbytes {
		return memcpyed(), nil
	}
	head := make([]byte, HeaderSize+4*nblocks)
	hdr(head, flags, total)
	pos := len(head)
	for j, b := range blocks {
		binary.LittleEndian.PutUint32(head[HeaderSize+4*j:], uint32(pos))
		pos += len(b)
	}
	parts := make([][]byte, 0, 1+nblocks)
	parts = append(append(parts, head), blocks...)
	// bytes.Join allocates without zeroing what it then fills.
	return bytes.Join(parts, nil), nil
}

// blockBufs recycles the buffers blocks are encoded into before Compress
// joins them into the frame.
var blockBufs sync.Pool

func getBlockBuf() []byte {
	if b, ok := blockBufs.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return nil
}

func putBlockBuf(b []byte) {
	// Blocks above 4 MiB (plus stream headers) are unusual; don't pin them.
	if b != nil && cap(b) <= 4<<20+4*maxSplits {
		blockBufs.Put(&b)
	}
}
