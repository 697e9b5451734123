// The output formats of cat: text, CSV (RFC 4180) and NumPy .npy.

package main

import (
	"bytes"
	"encoding/binary"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/x448/float16"

	"github.com/zarrgate/zarrgate/client"
)

// textString is a string as text output shows it: as it is when that is
// unambiguous, else quoted with Go's escapes, so that elements stay apart
// and an empty string is visible.
func textString(v string) string {
	if v == "" || v[0] == '"' {
		return strconv.Quote(v)
	}
	for _, r := range v {
		if r == '\\' || r == '"' || r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return strconv.Quote(v)
		}
	}
	return v
}

// printRows prints a C-order slab: one line per row of the last
// dimension, a blank line between 2-D planes (text), or CSV rows (RFC
// 4180: encoding/csv quotes what needs it).
func printRows(w io.Writer, shape []int64, format string, elem func(int64) string) error {
	var cw *csv.Writer
	writeRow := func(parts []string) error {
		_, err := fmt.Fprintln(w, strings.Join(parts, " "))
		return err
	}
	if format == "csv" {
		cw = csv.NewWriter(w)
		defer cw.Flush()
		writeRow = func(parts []string) error {
			if len(parts) == 1 && parts[0] == "" {
				// encoding/csv writes a lone empty field as an empty line,
				// which readers skip: quote it so the row stays.
				cw.Flush()
				_, err := io.WriteString(w, "\"\"\n")
				return err
			}
			return cw.Write(parts)
		}
	}
	if len(shape) == 0 {
		return writeRow([]string{elem(0)})
	}
	row := shape[len(shape)-1]
	total := int64(1)
	for _, s := range shape {
		total *= s
	}
	plane := row
	if len(shape) >= 2 {
		plane *= shape[len(shape)-2]
	}
	for i := int64(0); i < total; i += max(row, 1) {
		if format == "text" && i > 0 && len(shape) > 2 && i%plane == 0 {
			fmt.Fprintln(w)
		}
		parts := make([]string, row)
		for j := range row {
			parts[j] = elem(i + j)
		}
		if err := writeRow(parts); err != nil {
			return err
		}
		if row == 0 {
			break
		}
	}
	return nil
}

func elementFormatter(dtype string, size int) (func([]byte) string, error) {
	le := binary.LittleEndian
	ff := func(f float64, bits int) string { return strconv.FormatFloat(f, 'g', -1, bits) }
	switch dtype {
	case "bool":
		return func(b []byte) string { return strconv.FormatBool(b[0] != 0) }, nil
	case "int8":
		return func(b []byte) string { return strconv.FormatInt(int64(int8(b[0])), 10) }, nil
	case "int16":
		return func(b []byte) string { return strconv.FormatInt(int64(int16(le.Uint16(b))), 10) }, nil
	case "int32":
		return func(b []byte) string { return strconv.FormatInt(int64(int32(le.Uint32(b))), 10) }, nil
	case "int64":
		return func(b []byte) string { return strconv.FormatInt(int64(le.Uint64(b)), 10) }, nil
	case "uint8":
		return func(b []byte) string { return strconv.FormatUint(uint64(b[0]), 10) }, nil
	case "uint16":
		return func(b []byte) string { return strconv.FormatUint(uint64(le.Uint16(b)), 10) }, nil
	case "uint32":
		return func(b []byte) string { return strconv.FormatUint(uint64(le.Uint32(b)), 10) }, nil
	case "uint64":
		return func(b []byte) string { return strconv.FormatUint(le.Uint64(b), 10) }, nil
	case "float16":
		return func(b []byte) string { return ff(float64(float16.Frombits(le.Uint16(b)).Float32()), 32) }, nil
	case "float32":
		return func(b []byte) string { return ff(float64(math.Float32frombits(le.Uint32(b))), 32) }, nil
	case "float64":
		return func(b []byte) string { return ff(math.Float64frombits(le.Uint64(b)), 64) }, nil
	case "complex64":
		return func(b []byte) string {
			return strconv.FormatComplex(complex(float64(math.Float32frombits(le.Uint32(b))), float64(math.Float32frombits(le.Uint32(b[4:])))), 'g', -1, 64)
		}, nil
	case "complex128":
		return func(b []byte) string {
			return strconv.FormatComplex(complex(math.Float64frombits(le.Uint64(b)), math.Float64frombits(le.Uint64(b[8:]))), 'g', -1, 128)
		}, nil
	}
	return func(b []byte) string { return fmt.Sprintf("%x", b) }, nil // raw and fixed strings
}

var npyTypes = map[string]string{
	"bool": "|b1", "int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8", "uint8": "|u1", "uint16": "<u2",
	"uint32": "<u4", "uint64": "<u8", "float16": "<f2", "float32": "<f4", "float64": "<f8", "complex64": "<c8", "complex128": "<c16",
}

// writeNpy writes a NumPy .npy (format 1.0) file.
func writeNpy(w io.Writer, hdr *client.SlabHeader, data []byte) error {
	descr, ok := npyTypes[hdr.DataType]
	if !ok {
		descr = fmt.Sprintf("|V%d", hdr.ElementSize)
	}
	dims := make([]string, len(hdr.Shape))
	for i, s := range hdr.Shape {
		dims[i] = strconv.FormatInt(s, 10)
	}
	shape := strings.Join(dims, ", ")
	if len(dims) == 1 {
		shape += ","
	}
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape)
	pad := 64 - (10+len(header)+1)%64
	header += strings.Repeat(" ", pad%64) + "\n"
	var pre bytes.Buffer
	pre.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&pre, binary.LittleEndian, uint16(len(header)))
	pre.WriteString(header)
	if _, err := w.Write(pre.Bytes()); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}
