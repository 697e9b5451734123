package client

import (
	"context"
	"encoding/binary"
	"iter"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/shm"
)

// Element is a Go type that holds one element of a fixed-size Zarr data
// type: bool, int8…int64, uint8…uint64, float32, float64, complex64,
// complex128 (float16 and raw types are read as bytes through Blocks).
type Element interface {
	~bool | ~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 |
		~float32 | ~float64 | ~complex64 | ~complex128
}

var kindNames = map[reflect.Kind]string{
	reflect.Bool: "bool", reflect.Int8: "int8", reflect.Int16: "int16", reflect.Int32: "int32", reflect.Int64: "int64",
	reflect.Uint8: "uint8", reflect.Uint16: "uint16", reflect.Uint32: "uint32", reflect.Uint64: "uint64",
	reflect.Float32: "float32", reflect.Float64: "float64", reflect.Complex64: "complex64", reflect.Complex128: "complex128",
}

// DataTypeOf is the Zarr data type a Go element type holds.
func DataTypeOf[T Element]() string { return kindNames[reflect.TypeFor[T]().Kind()] }

func checkType[T Element](a *Array) error {
	if want := DataTypeOf[T](); a.DataType != want {
		return errs.New(errs.InvalidArgument, "array %q holds %s; read it into a slice of the matching Go type, not %s", a.Path, a.DataType, want)
	}
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return errs.New(errs.Unimplemented, "typed reads need a little-endian host; use Blocks")
	}
	return nil
}

// asBytes views a slice of elements as its bytes (no copy).
func asBytes[T Element](v []T) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*int(unsafe.Sizeof(v[0])))
}

// ReadInto reads the slab sel (nil: all) of a into dst, in C order; dst
// must have exactly as many elements as the slab.
func ReadInto[T Element](ctx context.Context, a *Array, sel Selection, dst []T) error {
	if err := checkType[T](a); err != nil {
		return err
	}
	shape := sel.Shape(a.Shape)
	if n := product(shape); int64(len(dst)) != n {
		return errs.New(errs.InvalidArgument, "read %q: dst has %d elements, the slab %v has %d", a.Path, len(dst), shape, n)
	}
	out := asBytes(dst)
	alloc := func(hdr *SlabHeader) ([]byte, error) {
		if hdr.ElementSize*len(dst) != len(out) || product(hdr.Shape) != int64(len(dst)) {
			return nil, errs.New(errs.DataLoss, "read %q: the server sends a slab of shape %v and %d-byte elements, not %v of %T", a.Path, hdr.Shape, hdr.ElementSize, shape, *new(T))
		}
		return out, nil
	}
	// A slab a client of several connections splits is not small (only
	// tests lower the split's floor that far).
	if int64(len(out)) <= smallSlabBytes && int64(len(dst)) < sharedMinElements && a.splitCuts(sel) == nil {
		if ok, err := readSmall(ctx, a, sel, alloc); ok {
			return err
		}
	}
	_, _, err := readDense(ctx, a, sel, alloc)
	return err
}

// ReadBytes reads the slab sel (nil: all) of a fixed-size array into dense
// C-order little-endian bytes, for any data type (float16, raw and fixed
// strings included), and returns the slab's header.
func ReadBytes(ctx context.Context, a *Array, sel Selection) (*SlabHeader, []byte, error) {
	return readDense(ctx, a, sel, func(hdr *SlabHeader) ([]byte, error) {
		if hdr.ElementSize == 0 {
			return nil, errs.New(errs.InvalidArgument, "array %q holds variable-length %s; use ReadStrings", a.Path, hdr.DataType)
		}
		return make([]byte, product(hdr.Shape)*int64(hdr.ElementSize)), nil
	})
}

// inlinePlaceBytes: slabs up to this size are placed by the receiving
// goroutine alone; starting copying goroutines costs a small read more
// than they save.
const inlinePlaceBytes = 1 << 20

// readDense reads the slab sel of a into the dense C-order buffer alloc
// returns for the slab's header. Blocks left in receive buffers or shared
// memory are copied out by several goroutines (slabs over
// inlinePlaceBytes); the others as they arrive.
func readDense(ctx context.Context, a *Array, sel Selection, alloc func(*SlabHeader) ([]byte, error)) (*SlabHeader, []byte, error) {
	if cuts := a.splitCuts(sel); cuts != nil {
		return readSplit(ctx, a, sel, cuts, alloc)
	}
	return readDenseVia(ctx, a, a.c.arrays, sel, alloc, nil)
}

// readDenseVia is readDense through one ArrayService client; with dest,
// alloc must return dest's data (its first bytes), which the gateway may
// write the slab into itself.
func readDenseVia(ctx context.Context, a *Array, arrays gatewayv1.ArrayServiceClient, sel Selection, alloc func(*SlabHeader) ([]byte, error), dest *shm.Dest) (*SlabHeader, []byte, error) {
	hdr, blocks, err := a.blocksVia(ctx, arrays, sel, recvPieces, dest)
	if err != nil {
		return nil, nil, err
	}
	out, err := alloc(hdr)
	if err != nil {
		for range blocks { // ends the call
			break
		}
		return nil, nil, err
	}
	// Blocks are checked against the slab as they arrive (checkBlock), so
	// placing one cannot fail.
	var (
		got  atomic.Int64
		jobs chan Block
		wg   sync.WaitGroup
	)
	if hdr.ElementSize > 0 && int64(len(out)) == product(hdr.Shape)*int64(hdr.ElementSize) {
		hdr.into = out // bulk blocks read straight into place
	}
	place := func(b Block) {
		if !b.placed {
			placeBlock(out, hdr.Shape, b, hdr.ElementSize)
		}
		got.Add(product(b.Shape))
		if b.done != nil {
			b.done()
		}
	}
	var failed error
	for b, err := range blocks {
		if err != nil {
			failed = err
			break
		}
		if b.done == nil || len(out) <= inlinePlaceBytes {
			place(b)
			continue
		}
		if jobs == nil {
			jobs = make(chan Block, 16)
			for range min(runtime.GOMAXPROCS(0), 4) {
				wg.Go(func() {
					for b := range jobs {
						place(b)
					}
				})
			}
		}
		jobs <- b
	}
	if jobs != nil {
		close(jobs)
		wg.Wait()
	}
	if failed != nil {
		return nil, nil, failed
	}
	if hdr.inPlace {
		got.Store(hdr.placed)
	}
	if n := product(hdr.Shape); got.Load() != n {
		return nil, nil, errs.New(errs.DataLoss, "read %q: the server sent %d of %d elements", a.Path, got.Load(), n)
	}
	return hdr, out, nil
}

// Read reads the slab sel (nil: all) of a into a new slice, and returns its
// shape.
func Read[T Element](ctx context.Context, a *Array, sel Selection) ([]T, []int64, error) {
	shape := sel.Shape(a.Shape)
	dst := make([]T, product(shape))
	return dst, shape, ReadInto(ctx, a, sel, dst)
}

// Write writes src, in C order, to the slab sel (nil: all) of a, streaming
// it in blocks of about 1 MiB straight from src's memory: src must not
// change until Write returns.
func Write[T Element](ctx context.Context, a *Array, sel Selection, src []T) (WriteStats, error) {
	if err := checkType[T](a); err != nil {
		return WriteStats{}, err
	}
	shape := sel.Shape(a.Shape)
	if n := product(shape); int64(len(src)) != n {
		return WriteStats{}, errs.New(errs.InvalidArgument, "write %q: src has %d elements, the slab %v has %d", a.Path, len(src), shape, n)
	}
	return a.writeBlocks(ctx, sel, bands(shape, asBytes(src), int(unsafe.Sizeof(src[0])), 1<<20), true)
}

// bands cuts a dense C-order slab into blocks of consecutive slices along
// the first dimension, about limit bytes each.
func bands(shape []int64, data []byte, elem int, limit int64) iter.Seq2[Block, error] {
	return func(yield func(Block, error) bool) {
		if len(shape) == 0 {
			yield(Block{Origin: []int64{}, Shape: []int64{}, Data: data}, nil)
			return
		}
		row := product(shape[1:]) * int64(elem)
		per := max(1, limit/max(row, 1))
		for i := int64(0); i < shape[0]; i += per {
			n := min(per, shape[0]-i)
			b := Block{Origin: make([]int64, len(shape)), Shape: append([]int64{n}, shape[1:]...), Data: data[i*row : (i+n)*row]}
			b.Origin[0] = i
			if !yield(b, nil) {
				return
			}
		}
	}
}

// placeBlock copies a block's rows into a dense slab of the given shape;
// the block has been checked against the slab (checkBlock).
func placeBlock(out []byte, shape []int64, b Block, elem int) {
	src := source{pieces: b.pieces}
	if b.pieces == nil {
		src.pieces = [][]byte{b.Data}
	}
	eachRow(out, shape, b, elem, src.read)
}

// eachRow calls f with each run of out (a dense slab of shape shape, elem
// bytes per element) that a block covers, in the block's C order: the
// rows over the trailing dimensions the block spans whole, joined. It
// returns the length of a run. The block has been checked against the
// slab.
func eachRow(out []byte, shape []int64, b Block, elem int, f func(row []byte)) int64 {
	nd := len(shape)
	if product(b.Shape) == 0 {
		return 0
	}
	run := nd
	rowBytes := int64(elem)
	for run > 0 {
		rowBytes *= b.Shape[run-1]
		run--
		if b.Shape[run] != shape[run] {
			break
		}
	}
	strides := make([]int64, nd)
	acc := int64(elem)
	for d := nd - 1; d >= 0; d-- {
		strides[d] = acc
		acc *= shape[d]
	}
	idx := make([]int64, nd)
	for {
		off := int64(0)
		for d := range nd {
			off += (b.Origin[d] + idx[d]) * strides[d]
		}
		f(out[off : off+rowBytes : off+rowBytes])
		d := run - 1
		for ; d >= 0; d-- {
			idx[d]++
			if idx[d] < b.Shape[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			return rowBytes
		}
	}
}

// source reads a block's data in order from the pieces it arrived in.
type source struct {
	pieces [][]byte
}

func (s *source) read(dst []byte) {
	for len(dst) > 0 {
		k := copy(dst, s.pieces[0])
		dst = dst[k:]
		if s.pieces[0] = s.pieces[0][k:]; len(s.pieces[0]) == 0 {
			s.pieces = s.pieces[1:]
		}
	}
}
