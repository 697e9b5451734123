// Package errs gives zarrgate's errors their codes. Every error a zarrgate
// package returns to a caller carries a code (NotFound, InvalidArgument,
// FailedPrecondition, ...) and a message a user can act on, so that
//
//	if errors.Is(err, errs.NotFound) { ... }
//
// holds whether err came from an in-process store or from a server.
//
// errs knows no transport: its Code has the numbers and names of gRPC's
// codes, and the transport edge (internal/grpcerr) turns errors into
// statuses and back. Packages built on errs (the store contract, backends)
// therefore link no gRPC. errs also gives the format's own errors (package
// zarr, which imports nothing of ours) their codes: a zarr error of kind
// zarr.ErrInvalid has code InvalidArgument and matches errs.InvalidArgument,
// and an InvalidArgument from the wire matches zarr.ErrInvalid.
package errs

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/zarrgate/zarrgate/zarr"
)

// Code is an error code. The constants have the numbers and names of
// gRPC's codes (google.golang.org/grpc/codes), so the transport edge
// converts by number; internal/grpcerr's tests hold the two lists equal.
type Code uint32

// The codes, numbered as gRPC numbers them.
const (
	CodeOK                 Code = 0
	CodeCanceled           Code = 1
	CodeUnknown            Code = 2
	CodeInvalidArgument    Code = 3
	CodeDeadlineExceeded   Code = 4
	CodeNotFound           Code = 5
	CodeAlreadyExists      Code = 6
	CodePermissionDenied   Code = 7
	CodeResourceExhausted  Code = 8
	CodeFailedPrecondition Code = 9
	CodeAborted            Code = 10
	CodeOutOfRange         Code = 11
	CodeUnimplemented      Code = 12
	CodeInternal           Code = 13
	CodeUnavailable        Code = 14
	CodeDataLoss           Code = 15
	CodeUnauthenticated    Code = 16
)

var codeNames = [...]string{
	CodeOK:                 "OK",
	CodeCanceled:           "Canceled",
	CodeUnknown:            "Unknown",
	CodeInvalidArgument:    "InvalidArgument",
	CodeDeadlineExceeded:   "DeadlineExceeded",
	CodeNotFound:           "NotFound",
	CodeAlreadyExists:      "AlreadyExists",
	CodePermissionDenied:   "PermissionDenied",
	CodeResourceExhausted:  "ResourceExhausted",
	CodeFailedPrecondition: "FailedPrecondition",
	CodeAborted:            "Aborted",
	CodeOutOfRange:         "OutOfRange",
	CodeUnimplemented:      "Unimplemented",
	CodeInternal:           "Internal",
	CodeUnavailable:        "Unavailable",
	CodeDataLoss:           "DataLoss",
	CodeUnauthenticated:    "Unauthenticated",
}

// String is the code's name as gRPC spells it ("NotFound"), or "Code(n)"
// for a number gRPC does not define.
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "Code(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// Kind is a sentinel error standing for one code. Compare errors with
// errors.Is(err, errs.NotFound) and friends.
type Kind struct {
	code Code
	name string
}

func (k *Kind) Error() string { return k.name }

// Code is the code this kind stands for.
func (k *Kind) Code() Code { return k.code }

// Is reports whether target is the zarr kind this kind stands for, so that
// errors.Is(errs.InvalidArgument, zarr.ErrInvalid) holds.
func (k *Kind) Is(target error) bool { return isZarrKind(k.code, target) }

// ZarrKind is the zarr error kind this kind stands for (nil if none): it
// lets errors.Is(zarrErr, errs.InvalidArgument) hold without zarr
// importing errs (zarr.KindReporter).
func (k *Kind) ZarrKind() *zarr.ErrorKind { return zarrKindOf(k.code) }

// Sentinels, one per code that zarrgate uses.
var (
	InvalidArgument    = &Kind{CodeInvalidArgument, "invalid argument"}
	NotFound           = &Kind{CodeNotFound, "not found"}
	AlreadyExists      = &Kind{CodeAlreadyExists, "already exists"}
	OutOfRange         = &Kind{CodeOutOfRange, "out of range"}
	FailedPrecondition = &Kind{CodeFailedPrecondition, "failed precondition"}
	PermissionDenied   = &Kind{CodePermissionDenied, "permission denied"}
	Unimplemented      = &Kind{CodeUnimplemented, "unimplemented"}
	DataLoss           = &Kind{CodeDataLoss, "data loss"}
	ResourceExhausted  = &Kind{CodeResourceExhausted, "resource exhausted"}
	Unavailable        = &Kind{CodeUnavailable, "unavailable"}
	Aborted            = &Kind{CodeAborted, "aborted"}
	Internal           = &Kind{CodeInternal, "internal error"}
	Unauthenticated    = &Kind{CodeUnauthenticated, "unauthenticated"}
)

// zarrKindOf and codeOfZarr are the mapping between the format's error
// kinds and codes, one to one.
func zarrKindOf(c Code) *zarr.ErrorKind {
	switch c {
	case CodeInvalidArgument:
		return zarr.ErrInvalid
	case CodeUnimplemented:
		return zarr.ErrUnsupported
	case CodeOutOfRange:
		return zarr.ErrOutOfRange
	case CodeInternal:
		return zarr.ErrInternal
	}
	return nil
}

func codeOfZarr(k *zarr.ErrorKind) (Code, bool) {
	switch k {
	case zarr.ErrInvalid:
		return CodeInvalidArgument, true
	case zarr.ErrUnsupported:
		return CodeUnimplemented, true
	case zarr.ErrOutOfRange:
		return CodeOutOfRange, true
	case zarr.ErrInternal:
		return CodeInternal, true
	}
	return 0, false
}

// isZarrKind reports whether target is the zarr kind of code c.
func isZarrKind(c Code, target error) bool {
	k, ok := target.(*zarr.ErrorKind)
	return ok && k == zarrKindOf(c)
}

// Error is an error with a code, a message and an optional cause.
type Error struct {
	code  Code
	msg   string
	cause error
}

func (e *Error) Error() string { return e.msg }

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.cause }

// Is reports whether target is the sentinel of this error's code: an errs
// Kind, or the zarr kind of the code (so an InvalidArgument rebuilt from
// the wire matches zarr.ErrInvalid).
func (e *Error) Is(target error) bool {
	if k, ok := target.(*Kind); ok {
		return k.code == e.code
	}
	return isZarrKind(e.code, target)
}

// Code is the error's code.
func (e *Error) Code() Code { return e.code }

// New returns an error of the given kind with a formatted message. A %w verb
// in format keeps its operand as the cause.
func New(kind *Kind, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &Error{code: kind.code, msg: err.Error(), cause: errors.Unwrap(err)}
}

// Wrap gives err a kind, keeping err as the cause. A nil err stays nil.
func Wrap(kind *Kind, err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf(format, args...)
	return &Error{code: kind.code, msg: msg + ": " + err.Error(), cause: err}
}

// WithCode returns an error with the given code and message and an
// optional cause. It is for edges that rebuild an error from a code they
// received (internal/grpcerr's FromStatus); code elsewhere uses New and a
// sentinel.
func WithCode(code Code, msg string, cause error) error {
	return &Error{code: code, msg: msg, cause: cause}
}

// CodeOf returns the code of err: the code of the first coded error in its
// chain (an Error, a Kind, or a zarr error or kind), Canceled or
// DeadlineExceeded for context errors, OK for nil and Unknown otherwise.
// (The type is Code, so the function that reads it cannot be.)
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	if c, ok := codeIn(err); ok {
		return c
	}
	switch {
	case errors.Is(err, context.Canceled):
		return CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return CodeDeadlineExceeded
	}
	return CodeUnknown
}

// codeIn walks err's chain, depth first as errors.Is does, to the first
// error that has a code.
func codeIn(err error) (Code, bool) {
	for err != nil {
		switch e := err.(type) {
		case *Error:
			return e.code, true
		case *Kind:
			return e.code, true
		case *zarr.Error:
			if c, ok := codeOfZarr(e.Kind()); ok {
				return c, true
			}
		case *zarr.ErrorKind:
			if c, ok := codeOfZarr(e); ok {
				return c, true
			}
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if c, ok := codeIn(e); ok {
					return c, true
				}
			}
			return 0, false
		default:
			return 0, false
		}
	}
	return 0, false
}
