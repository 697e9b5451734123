package zarr

import (
	"errors"
	"fmt"
)

// The format's errors are zarr's own types, so that the ground floor
// depends on no other package of zarrgate and on no transport. Each error
// has an ErrorKind; compare with errors.Is:
//
//	if errors.Is(err, zarr.ErrInvalid) { ... }
//
// Packages above zarr give the kinds their codes: errs maps ErrInvalid to
// InvalidArgument, ErrUnsupported to Unimplemented, ErrOutOfRange to
// OutOfRange and ErrInternal to Internal, so errors.Is(err,
// errs.InvalidArgument) holds for a zarr error of kind ErrInvalid too (see
// Error.Is), and errors.Is(err, zarr.ErrInvalid) for an InvalidArgument that
// came back over the wire.

// ErrorKind is a sentinel error standing for one class of format error.
type ErrorKind struct{ name string }

func (k *ErrorKind) Error() string { return k.name }

// Is reports whether target stands for this kind (see Error.Is), so that
// errors.Is(zarr.ErrInvalid, errs.InvalidArgument) holds like it does for
// an error of that kind.
func (k *ErrorKind) Is(target error) bool { return standsFor(target, k) }

// The kinds of format error.
var (
	// ErrInvalid: metadata, a selection or a value breaks the format's
	// rules or this library's limits.
	ErrInvalid = &ErrorKind{"invalid"}
	// ErrUnsupported: valid Zarr that this library does not implement (a
	// data type, codec, grid or extension it does not know).
	ErrUnsupported = &ErrorKind{"unsupported"}
	// ErrOutOfRange: a selection reaches outside the array.
	ErrOutOfRange = &ErrorKind{"out of range"}
	// ErrInternal: a bug in this library (an encoder produced something
	// it cannot read back).
	ErrInternal = &ErrorKind{"internal error"}
)

// KindReporter is implemented by sentinel errors of other packages that
// stand for a zarr kind: errors.Is(zarrErr, target) holds when target's
// ZarrKind is the error's kind. errs' sentinels implement it, which is how
// errors.Is(err, errs.InvalidArgument) matches a zarr error of kind
// ErrInvalid without zarr importing errs.
type KindReporter interface {
	ZarrKind() *ErrorKind
}

// standsFor reports whether target is kind k or a sentinel that stands
// for it.
func standsFor(target error, k *ErrorKind) bool {
	switch t := target.(type) {
	case *ErrorKind:
		return t == k
	case KindReporter:
		return t.ZarrKind() == k
	}
	return false
}

// Error is a format error: a kind, a message naming what is wrong, and an
// optional cause.
type Error struct {
	kind  *ErrorKind
	msg   string
	cause error
}

func (e *Error) Error() string { return e.msg }

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.cause }

// Kind is the error's kind (ErrInvalid, ErrUnsupported, ...).
func (e *Error) Kind() *ErrorKind { return e.kind }

// Is reports whether target is the error's kind, or a sentinel of another
// package that stands for it (a KindReporter).
func (e *Error) Is(target error) bool { return standsFor(target, e.kind) }

// newError returns an error of the given kind with a formatted message. A
// %w verb in format keeps its operand as the cause.
func newError(kind *ErrorKind, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &Error{kind: kind, msg: err.Error(), cause: errors.Unwrap(err)}
}

// wrapError gives err a kind, keeping err as the cause. A nil err stays nil.
func wrapError(kind *ErrorKind, err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf(format, args...)
	return &Error{kind: kind, msg: msg + ": " + err.Error(), cause: err}
}
