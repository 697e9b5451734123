package zarr

import (
	"errors"
	"fmt"
	"go/build"
	"strings"
	"testing"
)

// reporter stands for a sentinel of another package (errs.Kind) that
// reports the zarr kind it stands for.
type reporter struct{ k *ErrorKind }

func (r reporter) Error() string        { return "reporter" }
func (r reporter) ZarrKind() *ErrorKind { return r.k }

func TestErrors(t *testing.T) {
	cause := errors.New("bad json")
	err := newError(ErrInvalid, "zarr.json: %w", cause)
	var ze *Error
	if err.Error() != "zarr.json: bad json" || !errors.Is(err, cause) || !errors.As(err, &ze) || ze.Kind() != ErrInvalid {
		t.Errorf("newError: %v", err)
	}
	w := wrapError(ErrUnsupported, err, "node %q", "a")
	if w.Error() != `node "a": zarr.json: bad json` || !errors.Is(w, ErrUnsupported) || !errors.Is(w, ErrInvalid) || errors.Is(w, ErrOutOfRange) {
		t.Errorf("wrapError: %v", w)
	}
	if wrapError(ErrInvalid, nil, "x") != nil {
		t.Error("wrapError(nil) is not nil")
	}
	wrapped := fmt.Errorf("read: %w", newError(ErrOutOfRange, "dimension 0"))
	for _, tc := range []struct {
		target error
		want   bool
	}{
		{ErrOutOfRange, true},
		{ErrInvalid, false},
		{reporter{ErrOutOfRange}, true},
		{reporter{ErrInvalid}, false},
		{reporter{nil}, false},
		{errors.New("out of range"), false},
	} {
		if got := errors.Is(wrapped, tc.target); got != tc.want {
			t.Errorf("errors.Is(%v, %v) = %v, want %v", wrapped, tc.target, got, tc.want)
		}
		if got := errors.Is(ErrOutOfRange, tc.target); got != tc.want {
			t.Errorf("errors.Is(ErrOutOfRange, %v) = %v, want %v", tc.target, got, tc.want)
		}
	}
}

// TestImports keeps the format the ground floor: it imports the standard
// library and small format libraries only, nothing of zarrgate and no
// transport.
func TestImports(t *testing.T) {
	allowed := map[string]bool{"github.com/x448/float16": true}
	p, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range p.Imports {
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") && !allowed[imp] {
			t.Errorf("zarr imports %s: the format imports the standard library and %v only", imp, allowed)
		}
	}
}
