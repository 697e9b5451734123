package client_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
)

type S = client.Slice

func TestParseSelectionForms(t *testing.T) {
	shape := []int64{365, 10, 4}
	for _, c := range []struct {
		sel  string
		want client.Selection
	}{
		{"", nil},
		{"0:10,5:8:2,1", client.Selection{{0, 10, 1}, {5, 8, 2}, {1, 2, 1}}},
		{":,:,:", client.Selection{{0, 365, 1}, {0, 10, 1}, {0, 4, 1}}},
		{"::2, : , 3:", client.Selection{{0, 365, 2}, {0, 10, 1}, {3, 4, 1}}},
		// Dimensions after the last item are whole, as in NumPy.
		{"7", client.Selection{{7, 8, 1}, {0, 10, 1}, {0, 4, 1}}},
		{"...", client.Selection{{0, 365, 1}, {0, 10, 1}, {0, 4, 1}}},
		{"...,2", client.Selection{{0, 365, 1}, {0, 10, 1}, {2, 3, 1}}},
		{"1,...,2", client.Selection{{1, 2, 1}, {0, 10, 1}, {2, 3, 1}}},
		{"1,2,...,3", client.Selection{{1, 2, 1}, {2, 3, 1}, {3, 4, 1}}},
		// Negative indices and bounds count from the end.
		{"-1,-10,-4", client.Selection{{364, 365, 1}, {0, 1, 1}, {0, 1, 1}}},
		{"-5:,:-2,-3:-1", client.Selection{{360, 365, 1}, {0, 8, 1}, {1, 3, 1}}},
		{"-365:365:100", client.Selection{{0, 365, 100}, {0, 10, 1}, {0, 4, 1}}},
		// Empty slices are fine: start == stop.
		{"5:5,-2:8", client.Selection{{5, 5, 1}, {8, 8, 1}, {0, 4, 1}}},
	} {
		got, err := client.ParseSelection(c.sel, shape)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseSelection(%q) = %v, %v; want %v", c.sel, got, err, c.want)
		}
	}
}

// Every error names the dimension and the item, says what is wrong, and
// carries InvalidArgument (malformed) or OutOfRange (outside the array).
func TestParseSelectionErrors(t *testing.T) {
	for _, c := range []struct {
		sel   string
		shape []int64
		code  *errs.Kind
		want  []string
	}{
		// The malformed item, not the count, is the mistake.
		{"0:a", []int64{365, 10}, errs.InvalidArgument, []string{`dimension 0 ("0:a")`, `stop "a" is not an integer`}},
		{"1,x", []int64{365}, errs.InvalidArgument, []string{`dimension 1 ("x")`, `index "x" is not an integer`}},
		{"5:2", []int64{365}, errs.OutOfRange, []string{`dimension 0 ("5:2")`, "start 5 is after stop 2", "run forward"}},
		{"-1:3", []int64{365}, errs.OutOfRange, []string{`dimension 0 ("-1:3")`, "start -1 (= 364) is after stop 3"}},
		{"0:1,0:400", []int64{365, 365}, errs.OutOfRange, []string{`dimension 1 ("0:400")`, "stop 400 is outside the dimension's length 365", "-365 to 365"}},
		{"365", []int64{365}, errs.OutOfRange, []string{`dimension 0 ("365")`, "index 365 is outside", "-365 to 364"}},
		{"-366", []int64{365}, errs.OutOfRange, []string{"index -366 is outside"}},
		{"0", []int64{0}, errs.OutOfRange, []string{"the dimension is empty"}},
		{"...,-5", []int64{3, 4}, errs.OutOfRange, []string{`dimension 1 ("-5")`, "index -5"}},
		{"0:4:0", []int64{365}, errs.InvalidArgument, []string{`dimension 0 ("0:4:0")`, "step must be at least 1"}},
		{"::-1", []int64{365}, errs.InvalidArgument, []string{`dimension 0 ("::-1")`, "negative steps are not supported"}},
		{"1:2:3:4", []int64{365}, errs.InvalidArgument, []string{"want an index, start:stop or start:stop:step"}},
		{"1,,2", []int64{3, 3, 3}, errs.InvalidArgument, []string{`dimension 1 ("")`, "use ':' for the whole dimension"}},
		{"1,2", []int64{365}, errs.InvalidArgument, []string{"names 2 dimensions, but the array has 1 dimension (shape [365])"}},
		{"1,2,...", []int64{365}, errs.InvalidArgument, []string{"names 2 dimensions, but the array has 1 dimension"}},
		{"...,...", []int64{3, 3}, errs.InvalidArgument, []string{`"..." may appear only once`}},
		// Without a shape, bounds must be explicit.
		{"...", nil, errs.InvalidArgument, []string{`"..." needs the array's shape`}},
		{"-1", nil, errs.InvalidArgument, []string{"needs the array's shape"}},
		{"2:", nil, errs.InvalidArgument, []string{"explicit stop"}},
	} {
		_, err := client.ParseSelection(c.sel, c.shape)
		if err == nil {
			t.Errorf("ParseSelection(%q, %v) succeeded", c.sel, c.shape)
			continue
		}
		if !errors.Is(err, c.code) {
			t.Errorf("ParseSelection(%q, %v): code %v, want %v: %v", c.sel, c.shape, grpcerr.Code(err), c.code, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ParseSelection(%q, %v) = %q; lacks %q", c.sel, c.shape, err, w)
			}
		}
		if strings.Contains(err.Error(), "1 dimensions") {
			t.Errorf("ParseSelection(%q): %q", c.sel, err)
		}
	}
}

func TestMustParseSelectionExplicit(t *testing.T) {
	got := client.MustParseSelection("0:10, 5:20:2, 7")
	want := client.Selection{{0, 10, 1}, {5, 20, 2}, {7, 8, 1}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("MustParseSelection = %v, want %v", got, want)
	}
}
