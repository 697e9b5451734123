// Package zarr is the Zarr format, without I/O: metadata documents (v3, v2,
// NCZarr), data types and fill values, chunk grids, chunk key encodings and
// selections. Everything else in zarrgate stands on it; it imports nothing
// of zarrgate, and no transport: its errors are its own (errors.go).
package zarr

import (
	"strconv"
	"strings"
)

// Kind is the family of a data type.
type Kind uint8

// Data type kinds.
const (
	KindBool Kind = iota + 1
	KindInt
	KindUint
	KindFloat
	KindComplex
	KindRaw          // v3 r<bits>: opaque bytes, never byte-swapped
	KindString       // v3 "string": variable-length UTF-8
	KindBytes        // v3 "bytes": variable-length bytes
	KindFixedBytes   // v2 "|S<n>": n bytes, NUL padded
	KindFixedUnicode // v2 "<U<n>" / ">U<n>": n UTF-32 code units
)

// DataType is an element type. In decoded chunks, fixed-size elements are
// stored C-order in little-endian byte order, Size bytes each.
// Variable-length types (string, bytes) have Size 0.
type DataType struct {
	// Name is the v3 name ("float32", "r16", "string") or, for v2-only
	// types, the v2 typestring without byte order ("S8", "U4").
	Name string
	Kind Kind
	// Size is the size of one element in bytes; 0 for variable length.
	Size int
}

// SwapUnit is the size of the units whose bytes a big-endian encoding
// reverses: the element size for numbers, half of it for complex numbers
// (real and imaginary parts swap separately), 4 for UTF-32 strings, and 1
// (no swapping) for bool, raw and byte strings.
func (d DataType) SwapUnit() int {
	switch d.Kind {
	case KindInt, KindUint, KindFloat:
		return d.Size
	case KindComplex:
		return d.Size / 2
	case KindFixedUnicode:
		return 4
	}
	return 1
}

// VariableLength reports whether elements have no fixed size.
func (d DataType) VariableLength() bool { return d.Kind == KindString || d.Kind == KindBytes }

func (d DataType) String() string { return d.Name }

var coreTypes = map[string]DataType{
	"bool":       {"bool", KindBool, 1},
	"int8":       {"int8", KindInt, 1},
	"int16":      {"int16", KindInt, 2},
	"int32":      {"int32", KindInt, 4},
	"int64":      {"int64", KindInt, 8},
	"uint8":      {"uint8", KindUint, 1},
	"uint16":     {"uint16", KindUint, 2},
	"uint32":     {"uint32", KindUint, 4},
	"uint64":     {"uint64", KindUint, 8},
	"float16":    {"float16", KindFloat, 2},
	"float32":    {"float32", KindFloat, 4},
	"float64":    {"float64", KindFloat, 8},
	"complex64":  {"complex64", KindComplex, 8},
	"complex128": {"complex128", KindComplex, 16},
	"string":     {"string", KindString, 0},
	"bytes":      {"bytes", KindBytes, 0},
}

// ParseDataType parses a v3 data type name: a core type, "r<bits>" with
// bits a positive multiple of 8, "string" or "bytes". An unknown name is an
// error matching ErrUnsupported and naming it.
func ParseDataType(name string) (DataType, error) {
	if d, ok := coreTypes[name]; ok {
		return d, nil
	}
	if bits, ok := strings.CutPrefix(name, "r"); ok {
		n, err := strconv.Atoi(bits)
		if err == nil && n > 0 && n%8 == 0 {
			return DataType{Name: name, Kind: KindRaw, Size: n / 8}, nil
		}
		return DataType{}, newError(ErrInvalid, "data type %q: raw types are r<bits> with bits a positive multiple of 8", name)
	}
	return DataType{}, newError(ErrUnsupported, "data type %q is not supported", name)
}

// MustDataType is ParseDataType for names known to be valid.
func MustDataType(name string) DataType {
	d, err := ParseDataType(name)
	if err != nil {
		panic(err)
	}
	return d
}
