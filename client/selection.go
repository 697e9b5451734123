package client

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
)

// Slice selects Start, Start+Step, ... below Stop along one dimension.
type Slice struct{ Start, Stop, Step int64 }

// Selection is one Slice per dimension; nil selects the whole array.
type Selection []Slice

func (sel Selection) proto() []*gatewayv1.Slice {
	out := make([]*gatewayv1.Slice, len(sel))
	for i, s := range sel {
		out[i] = &gatewayv1.Slice{Start: uint64(s.Start), Stop: uint64(s.Stop), Step: uint64(s.Step)}
	}
	return out
}

// Shape is the shape of the selection's output on an array of shape.
func (sel Selection) Shape(shape []int64) []int64 {
	if sel == nil {
		return append([]int64(nil), shape...)
	}
	out := make([]int64, len(sel))
	for d, s := range sel {
		step := max(s.Step, 1)
		if s.Stop > s.Start {
			out[d] = (s.Stop - s.Start + step - 1) / step
		}
	}
	return out
}

// ParseSelection parses a NumPy-style selection: items separated by
// commas, one per dimension, each
//
//	i               one element; negative counts from the end (-1 is the last)
//	start:stop      elements start to stop-1; either may be left out or negative
//	start:stop:step every step-th of them; step is positive
//	:               the whole dimension
//	...             as many ':' as the dimensions not named (at most once)
//
// Dimensions after the last item are selected whole, as in NumPy. With
// the array's shape, negative bounds count from the end and every bound is
// checked: unlike NumPy, a bound past the end is an error, not clipped, so
// a mistyped selection does not silently read less. Without a shape (nil),
// bounds must be explicit and non-negative, and "..." is refused.
//
// Malformed items and negative steps are errs.InvalidArgument, bounds
// outside the array errs.OutOfRange; each message names the dimension and
// the item.
func ParseSelection(s string, shape []int64) (Selection, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	ellipsis := -1
	for i, p := range parts {
		if p != "..." {
			continue
		}
		if ellipsis >= 0 {
			return nil, errs.New(errs.InvalidArgument, "selection %q: \"...\" may appear only once", s)
		}
		if shape == nil {
			return nil, errs.New(errs.InvalidArgument, "selection %q: \"...\" needs the array's shape", s)
		}
		ellipsis = i
	}
	named := len(parts)
	if ellipsis >= 0 {
		named--
	}
	// dim is the dimension item i selects: items after "..." count from
	// the last dimension. When there are too many items the count check
	// below reports it, after any malformed item (the more specific
	// mistake).
	dim := func(i int) int {
		if ellipsis >= 0 && i > ellipsis && named <= len(shape) {
			return len(shape) - (len(parts) - i)
		}
		return i
	}
	items := make([]item, len(parts))
	for i, p := range parts {
		if i == ellipsis {
			continue
		}
		it, err := parseItem(p)
		if err != nil {
			return nil, errs.Wrap(errs.InvalidArgument, err, "selection dimension %d (%q)", dim(i), p)
		}
		items[i] = it
	}
	if shape != nil && named > len(shape) {
		return nil, errs.New(errs.InvalidArgument, "selection %q names %d dimensions, but the array has %s (shape %v)",
			s, named, plural(len(shape), "dimension"), shape)
	}
	if shape == nil {
		sel := make(Selection, len(items))
		for d, it := range items {
			r, err := it.explicit()
			if err != nil {
				return nil, errs.Wrap(errs.InvalidArgument, err, "selection dimension %d (%q)", d, parts[d])
			}
			sel[d] = r
		}
		return sel, nil
	}
	sel := make(Selection, len(shape))
	whole := make([]bool, len(shape)) // dimensions no item names
	for d := range whole {
		whole[d] = true
	}
	for i, it := range items {
		if i == ellipsis {
			continue
		}
		d := dim(i)
		whole[d] = false
		r, err := it.resolve(shape[d])
		if err != nil {
			kind := errs.InvalidArgument
			if errors.Is(err, errs.OutOfRange) {
				kind = errs.OutOfRange
			}
			return nil, errs.Wrap(kind, err, "selection dimension %d (%q)", d, parts[i])
		}
		sel[d] = r
	}
	for d, w := range whole {
		if w {
			sel[d] = Slice{Start: 0, Stop: shape[d], Step: 1}
		}
	}
	return sel, nil
}

// MustParseSelection is ParseSelection with explicit bounds, panicking on
// a malformed literal; for constants in code.
func MustParseSelection(s string) Selection {
	sel, err := ParseSelection(s, nil)
	if err != nil {
		panic(err)
	}
	return sel
}

// item is one parsed selection item; nil bounds were left out.
type item struct {
	index             bool
	start, stop, step *int64
}

func parseItem(p string) (item, error) {
	if p == "" {
		return item{}, errs.New(errs.InvalidArgument, "empty; use ':' for the whole dimension")
	}
	fields := strings.Split(p, ":")
	if len(fields) > 3 {
		return item{}, errs.New(errs.InvalidArgument, "want an index, start:stop or start:stop:step")
	}
	var it item
	bounds := []**int64{&it.start, &it.stop, &it.step}
	names := []string{"start", "stop", "step"}
	if len(fields) == 1 {
		it.index, names[0] = true, "index"
	}
	for i, f := range fields {
		f = strings.TrimSpace(f)
		if f == "" {
			if it.index {
				return item{}, errs.New(errs.InvalidArgument, "empty index")
			}
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return item{}, errs.New(errs.InvalidArgument, "%s %q is not an integer", names[i], f)
		}
		*bounds[i] = &v
	}
	if it.step != nil {
		switch st := *it.step; {
		case st == 0:
			return item{}, errs.New(errs.InvalidArgument, "step must be at least 1")
		case st < 0:
			return item{}, errs.New(errs.InvalidArgument, "step %d: negative steps are not supported (steps must be positive; select forward and reverse the result)", st)
		}
	}
	return it, nil
}

func (it item) stepOr1() int64 {
	if it.step == nil {
		return 1
	}
	return *it.step
}

// explicit is the slice of an item with no shape to resolve it against.
func (it item) explicit() (Slice, error) {
	if it.start != nil && *it.start < 0 || it.stop != nil && *it.stop < 0 {
		return Slice{}, errs.New(errs.InvalidArgument, "a negative bound counts from the end, which needs the array's shape")
	}
	if it.index {
		return Slice{Start: *it.start, Stop: *it.start + 1, Step: 1}, nil
	}
	if it.stop == nil {
		return Slice{}, errs.New(errs.InvalidArgument, "needs an explicit stop without the array's shape")
	}
	var start int64
	if it.start != nil {
		start = *it.start
	}
	return Slice{Start: start, Stop: *it.stop, Step: it.stepOr1()}, nil
}

// resolve turns an item into a slice of a dimension of length n: negative
// bounds count from the end; bounds outside the dimension are errors.
func (it item) resolve(n int64) (Slice, error) {
	if it.index {
		i := *it.start
		if i < -n || i >= n {
			if n == 0 {
				return Slice{}, errs.New(errs.OutOfRange, "index %d: the dimension is empty (length 0)", i)
			}
			return Slice{}, errs.New(errs.OutOfRange, "index %d is outside the dimension's length %d (valid: %d to %d)", i, n, -n, n-1)
		}
		if i < 0 {
			i += n
		}
		return Slice{Start: i, Stop: i + 1, Step: 1}, nil
	}
	bound := func(name string, p *int64, def int64) (int64, error) {
		if p == nil {
			return def, nil
		}
		v := *p
		if v < -n || v > n {
			return 0, errs.New(errs.OutOfRange, "%s %d is outside the dimension's length %d (valid: %d to %d)", name, v, n, -n, n)
		}
		if v < 0 {
			v += n
		}
		return v, nil
	}
	start, err := bound("start", it.start, 0)
	if err != nil {
		return Slice{}, err
	}
	stop, err := bound("stop", it.stop, n)
	if err != nil {
		return Slice{}, err
	}
	if start > stop {
		return Slice{}, errs.New(errs.OutOfRange, "start %s is after stop %s: slices run forward (start <= stop; steps are positive)",
			pos(*it.start, start), pos(*it.stop, stop))
	}
	return Slice{Start: start, Stop: stop, Step: it.stepOr1()}, nil
}

// plural is "1 dimension", "2 dimensions".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}

// pos shows a bound as given, with the element it names if it counted
// from the end: "-3 (= 362)".
func pos(given, resolved int64) string {
	if given == resolved {
		return strconv.FormatInt(given, 10)
	}
	return fmt.Sprintf("%d (= %d)", given, resolved)
}

func product(s []int64) int64 {
	n := int64(1)
	for _, x := range s {
		n *= x
	}
	return n
}
