package storesvc

import (
	"fmt"

	"github.com/zarrgate/zarrgate/errs"
)

type rangeKind uint8

const (
	rangeWhole rangeKind = iota
	rangeBounded
	rangeFrom
	rangeSuffix
)

// ByteRange selects part of a value, in one of the three forms Zarr readers
// use. The zero value selects the whole value.
type ByteRange struct {
	kind   rangeKind
	offset int64
	length int64
}

// Bounded selects length bytes starting at offset.
func Bounded(offset, length int64) ByteRange {
	return ByteRange{kind: rangeBounded, offset: offset, length: length}
}

// FromOffset selects everything from offset to the end of the value.
func FromOffset(offset int64) ByteRange { return ByteRange{kind: rangeFrom, offset: offset} }

// Suffix selects the last n bytes of the value (a shard index, for example).
func Suffix(n int64) ByteRange { return ByteRange{kind: rangeSuffix, length: n} }

// IsWhole reports whether r selects the whole value.
func (r ByteRange) IsWhole() bool { return r.kind == rangeWhole }

// Parts returns the range's fields: for Bounded (offset, length); for
// FromOffset (offset, -1); for Suffix (-1, n); for the whole value (0, -1).
func (r ByteRange) Parts() (offset, length int64) {
	switch r.kind {
	case rangeBounded:
		return r.offset, r.length
	case rangeFrom:
		return r.offset, -1
	case rangeSuffix:
		return -1, r.length
	}
	return 0, -1
}

// IsSuffix reports whether r is a suffix range.
func (r ByteRange) IsSuffix() bool { return r.kind == rangeSuffix }

// Validate rejects negative offsets and lengths.
func (r ByteRange) Validate() error {
	if r.offset < 0 || r.length < 0 {
		return errs.New(errs.InvalidArgument, "invalid byte range %v: negative offset or length", r)
	}
	if r.kind == rangeBounded && r.offset > (1<<62)-r.length {
		return errs.New(errs.InvalidArgument, "invalid byte range %v: overflows", r)
	}
	return nil
}

// Resolve returns the absolute offset and length of r within a value of the
// given size. A range that does not lie within the value is an error matching
// ErrOutOfRange.
func (r ByteRange) Resolve(size int64) (offset, length int64, err error) {
	switch r.kind {
	case rangeWhole:
		return 0, size, nil
	case rangeBounded:
		if r.offset+r.length > size {
			return 0, 0, errs.New(errs.OutOfRange, "byte range %v is past the end of the %d-byte value", r, size)
		}
		return r.offset, r.length, nil
	case rangeFrom:
		if r.offset > size {
			return 0, 0, errs.New(errs.OutOfRange, "byte range %v is past the end of the %d-byte value", r, size)
		}
		return r.offset, size - r.offset, nil
	default:
		if r.length > size {
			return 0, 0, errs.New(errs.OutOfRange, "byte range %v is longer than the %d-byte value", r, size)
		}
		return size - r.length, r.length, nil
	}
}

// String formats r as Python slice notation: [a:b], [a:], [-n:] or [:].
func (r ByteRange) String() string {
	switch r.kind {
	case rangeBounded:
		return fmt.Sprintf("[%d:%d]", r.offset, r.offset+r.length)
	case rangeFrom:
		return fmt.Sprintf("[%d:]", r.offset)
	case rangeSuffix:
		return fmt.Sprintf("[-%d:]", r.length)
	}
	return "[:]"
}
