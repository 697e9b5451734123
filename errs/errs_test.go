package errs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

func TestCodeString(t *testing.T) {
	for c, want := range map[errs.Code]string{
		errs.CodeOK: "OK", errs.CodeInvalidArgument: "InvalidArgument",
		errs.CodeUnauthenticated: "Unauthenticated", 17: "Code(17)",
	} {
		if got := c.String(); got != want {
			t.Errorf("Code(%d).String() = %q, want %q", uint32(c), got, want)
		}
	}
}

func TestCodeOf(t *testing.T) {
	notFound := errs.New(errs.NotFound, "key %q not found", "a")
	for _, tc := range []struct {
		what string
		err  error
		want errs.Code
	}{
		{"nil", nil, errs.CodeOK},
		{"plain", errors.New("boom"), errs.CodeUnknown},
		{"New", notFound, errs.CodeNotFound},
		{"wrapped New", fmt.Errorf("get: %w", notFound), errs.CodeNotFound},
		{"sentinel", errs.Unauthenticated, errs.CodeUnauthenticated},
		{"WithCode", errs.WithCode(errs.CodeAborted, "x", nil), errs.CodeAborted},
		{"canceled", fmt.Errorf("read: %w", context.Canceled), errs.CodeCanceled},
		{"deadline", context.DeadlineExceeded, errs.CodeDeadlineExceeded},
		// the first coded error in the chain wins, whoever made it
		{"Wrap over a coded cause", errs.Wrap(errs.Internal, notFound, "set"), errs.CodeInternal},
		{"joined", errors.Join(errors.New("x"), notFound), errs.CodeNotFound},
		// zarr's own errors get their codes here
		{"zarr invalid", zarrInvalid(t), errs.CodeInvalidArgument},
		{"zarr unsupported", zarrUnsupported(t), errs.CodeUnimplemented},
		{"zarr out of range", zarrOutOfRange(t), errs.CodeOutOfRange},
		{"zarr internal kind", fmt.Errorf("encode: %w", zarr.ErrInternal), errs.CodeInternal},
		{"errs over zarr", errs.Wrap(errs.DataLoss, zarrInvalid(t), "chunk"), errs.CodeDataLoss},
		{"zarr kind over errs", fmt.Errorf("%w: %w", zarr.ErrUnsupported, notFound), errs.CodeUnimplemented},
	} {
		if got := errs.CodeOf(tc.err); got != tc.want {
			t.Errorf("%s: CodeOf(%v) = %v, want %v", tc.what, tc.err, got, tc.want)
		}
	}
}

func TestNewWrap(t *testing.T) {
	cause := errors.New("disk on fire")
	err := errs.New(errs.DataLoss, "read %q: %w", "k", cause)
	if err.Error() != `read "k": disk on fire` || !errors.Is(err, cause) || !errors.Is(err, errs.DataLoss) || errors.Is(err, errs.NotFound) {
		t.Errorf("New: %v", err)
	}
	w := errs.Wrap(errs.Unavailable, cause, "dial %s", "x")
	if w.Error() != "dial x: disk on fire" || !errors.Is(w, cause) || !errors.Is(w, errs.Unavailable) {
		t.Errorf("Wrap: %v", w)
	}
	if errs.Wrap(errs.Internal, nil, "x") != nil {
		t.Error("Wrap(nil) is not nil")
	}
}

func zarrInvalid(t *testing.T) error {
	t.Helper()
	_, err := zarr.ParseV3([]byte("{"))
	if err == nil {
		t.Fatal("ParseV3 accepted broken JSON")
	}
	return err
}

func zarrUnsupported(t *testing.T) error {
	t.Helper()
	_, err := zarr.ParseDataType("datetime64")
	if err == nil {
		t.Fatal("ParseDataType accepted datetime64")
	}
	return err
}

func zarrOutOfRange(t *testing.T) error {
	t.Helper()
	_, err := zarr.Project([]int64{10}, []int64{5}, []zarr.Range{{Start: 0, Stop: 11, Step: 1}})
	if err == nil {
		t.Fatal("Project accepted a selection outside the array")
	}
	return err
}

// TestZarrKinds: every kind of the format's errors and the code errs gives
// it match each other in both directions, in process and after a trip
// through a code (as an error rebuilt from the wire is).
func TestZarrKinds(t *testing.T) {
	all := []*errs.Kind{errs.InvalidArgument, errs.NotFound, errs.AlreadyExists, errs.OutOfRange, errs.FailedPrecondition,
		errs.PermissionDenied, errs.Unimplemented, errs.DataLoss, errs.ResourceExhausted, errs.Unavailable,
		errs.Aborted, errs.Internal, errs.Unauthenticated}
	for _, tc := range []struct {
		kind *zarr.ErrorKind
		errs *errs.Kind
		err  error // a real error of that kind
	}{
		{zarr.ErrInvalid, errs.InvalidArgument, zarrInvalid(t)},
		{zarr.ErrUnsupported, errs.Unimplemented, zarrUnsupported(t)},
		{zarr.ErrOutOfRange, errs.OutOfRange, zarrOutOfRange(t)},
		{zarr.ErrInternal, errs.Internal, fmt.Errorf("x: %w", zarr.ErrInternal)},
	} {
		var ze *zarr.Error
		if tc.kind != zarr.ErrInternal && (!errors.As(tc.err, &ze) || ze.Kind() != tc.kind) {
			t.Errorf("%v: not a *zarr.Error of kind %v", tc.err, tc.kind)
		}
		if tc.errs.ZarrKind() != tc.kind {
			t.Errorf("%v.ZarrKind() = %v, want %v", tc.errs, tc.errs.ZarrKind(), tc.kind)
		}
		for _, k := range all {
			want := k == tc.errs
			if got := errors.Is(tc.err, k); got != want {
				t.Errorf("errors.Is(zarr %v error, errs %v) = %v, want %v", tc.kind, k, got, want)
			}
			if got := errors.Is(tc.kind, k); got != want {
				t.Errorf("errors.Is(zarr %v, errs %v) = %v, want %v", tc.kind, k, got, want)
			}
			if got := errors.Is(k, tc.kind); got != want {
				t.Errorf("errors.Is(errs %v, zarr %v) = %v, want %v", k, tc.kind, got, want)
			}
			// an error rebuilt from a code, as from the wire
			rebuilt := errs.WithCode(k.Code(), tc.err.Error(), nil)
			if got := errors.Is(rebuilt, tc.kind); got != want {
				t.Errorf("errors.Is(errs error coded %v, zarr %v) = %v, want %v", k.Code(), tc.kind, got, want)
			}
		}
		if !errors.Is(tc.err, tc.kind) {
			t.Errorf("errors.Is(%v, %v) is false", tc.err, tc.kind)
		}
	}
	// codes with no zarr kind match none
	for _, k := range []*zarr.ErrorKind{zarr.ErrInvalid, zarr.ErrUnsupported, zarr.ErrOutOfRange, zarr.ErrInternal} {
		if errors.Is(errs.New(errs.NotFound, "x"), k) || errors.Is(errs.WithCode(errs.CodeUnknown, "x", nil), k) {
			t.Errorf("a NotFound or Unknown error matches zarr %v", k)
		}
	}
	if errs.NotFound.ZarrKind() != nil {
		t.Errorf("errs.NotFound.ZarrKind() = %v, want nil", errs.NotFound.ZarrKind())
	}
}
