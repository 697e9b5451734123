// zarrgate cat: a selection of an array, printed.

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/errs"
)

func runCat(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("cat", stderr)
	addr := addrFlag(fs)
	format := fs.String("format", "text", "output format: text, csv or npy")
	output := fs.String("o", "-", "output file (- for stdout)")
	all := fs.Bool("all", false, fmt.Sprintf("print a whole array of more than %s elements to stdout (without a SELECTION)", humanCount(catAllLimit)))
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usageError{errors.New("want PATH and an optional SELECTION such as 0:10,5:20:2")}
	}
	switch *format {
	case "text", "csv", "npy":
	default:
		return usageError{fmt.Errorf("--format %q: want text, csv or npy", *format)}
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	a, err := c.OpenArray(ctx, strings.Trim(pos[0], "/"))
	if err != nil {
		return err
	}
	var sel client.Selection
	if len(pos) == 2 {
		if sel, err = client.ParseSelection(pos[1], a.Shape); err != nil {
			return usageError{err}
		}
	} else if n := elements(a.Shape); n > catAllLimit && !*all && *output == "-" {
		return usageError{fmt.Errorf("/%s has %d elements (shape %v), more than the %s cat prints whole: give a SELECTION (such as 0:10 or ...,-1) or pass --all",
			a.Path, n, a.Shape, humanCount(catAllLimit))}
	}
	out := stdout
	if *output != "-" {
		f, err := os.Create(*output)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	return catArray(ctx, a, sel, *format, out)
}

// catAllLimit is the most elements cat prints to stdout without a
// selection or --all: a whole large array on a terminal is a mistake more
// often than not.
const catAllLimit = 1 << 20

// catHelp is cat's help beyond its flags.
const catHelp = `
SELECTION is NumPy's: one item per dimension, separated by commas:
  7          one element (-1: the last)
  2:10       elements 2 to 9; either bound may be left out or negative
  0:100:5    every 5th (steps are positive)
  :          the whole dimension
  ...        as many ':' as the dimensions not named
Dimensions after the last item are whole. Unlike NumPy, a bound past the
end is an error, not clipped.

Text output separates elements by spaces, rows by lines and planes by
blank lines; strings that are empty or hold spaces, quotes, backslashes or
control characters are quoted with Go's escapes ("a b", "tab\there").
CSV output is RFC 4180, as spreadsheets and csv readers expect.
Without a SELECTION, arrays of more than 1 Mi elements need --all (or -o).
`

func elements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// catArray prints a slab. The slab is assembled in memory, as text and
// .npy output need it in order; use the client's Blocks for larger ones.
func catArray(ctx context.Context, a *client.Array, sel client.Selection, format string, out io.Writer) error {
	w := bufio.NewWriter(out)
	defer w.Flush()
	if a.DataType == "string" || a.DataType == "bytes" {
		vals, shape, err := client.ReadStrings(ctx, a, sel)
		if err != nil {
			return err
		}
		if format == "npy" {
			return errs.New(errs.Unimplemented, "cat: .npy output of variable-length strings is not supported; use text or csv")
		}
		return printRows(w, shape, format, func(i int64) string {
			if format == "text" {
				return textString(vals[i])
			}
			return vals[i] // the CSV writer quotes
		})
	}
	n := int64(1)
	for _, d := range sel.Shape(a.Shape) {
		n *= d
	}
	if n > 1<<30 {
		return errs.New(errs.ResourceExhausted, "cat: the slab %v is over a billion elements; select a part of it", sel.Shape(a.Shape))
	}
	hdr, buf, err := client.ReadBytes(ctx, a, sel)
	if err != nil {
		return err
	}
	if format == "npy" {
		return writeNpy(w, hdr, buf)
	}
	fmtElem, err := elementFormatter(hdr.DataType, hdr.ElementSize)
	if err != nil {
		return err
	}
	return printRows(w, hdr.Shape, format, func(i int64) string {
		return fmtElem(buf[i*int64(hdr.ElementSize) : (i+1)*int64(hdr.ElementSize)])
	})
}
