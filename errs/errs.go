// Package errs is the one place where zarrgate's errors meet gRPC status
// codes. Every error a zarrgate package returns to a caller carries a code
// (NotFound, InvalidArgument, FailedPrecondition, ...) and a message a user
// can act on. Servers turn errors into statuses with ToStatus; clients turn
// statuses back into errors with FromStatus, so that a remote error is
// comparable with errors.Is to the same sentinel as the local one:
//
//	if errors.Is(err, errs.NotFound) { ... }
//
// holds whether err came from an in-process store or from a server.
package errs

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Kind is a sentinel error standing for one gRPC code. Compare errors with
// errors.Is(err, errs.NotFound) and friends.
type Kind struct {
	code codes.Code
	name string
}

func (k *Kind) Error() string { return k.name }

// Code is the gRPC code this kind stands for.
func (k *Kind) Code() codes.Code { return k.code }

// Sentinels, one per gRPC code that zarrgate uses.
var (
	InvalidArgument    = &Kind{codes.InvalidArgument, "invalid argument"}
	NotFound           = &Kind{codes.NotFound, "not found"}
	AlreadyExists      = &Kind{codes.AlreadyExists, "already exists"}
	OutOfRange         = &Kind{codes.OutOfRange, "out of range"}
	FailedPrecondition = &Kind{codes.FailedPrecondition, "failed precondition"}
	PermissionDenied   = &Kind{codes.PermissionDenied, "permission denied"}
	Unimplemented      = &Kind{codes.Unimplemented, "unimplemented"}
	DataLoss           = &Kind{codes.DataLoss, "data loss"}
	ResourceExhausted  = &Kind{codes.ResourceExhausted, "resource exhausted"}
	Unavailable        = &Kind{codes.Unavailable, "unavailable"}
	Aborted            = &Kind{codes.Aborted, "aborted"}
	Internal           = &Kind{codes.Internal, "internal error"}
)

var kinds = map[codes.Code]*Kind{}

func init() {
	for _, k := range []*Kind{InvalidArgument, NotFound, AlreadyExists, OutOfRange, FailedPrecondition,
		PermissionDenied, Unimplemented, DataLoss, ResourceExhausted, Unavailable, Aborted, Internal} {
		kinds[k.code] = k
	}
}

// Error is an error with a code, a message and an optional cause.
type Error struct {
	code  codes.Code
	msg   string
	cause error
}

func (e *Error) Error() string { return e.msg }

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.cause }

// Is reports whether target is the sentinel of this error's code.
func (e *Error) Is(target error) bool {
	k, ok := target.(*Kind)
	return ok && k.code == e.code
}

// GRPCStatus lets grpc-go turn the error into a status by itself.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.code, e.msg) }

// Code is the gRPC code of the error.
func (e *Error) Code() codes.Code { return e.code }

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

// Code returns the gRPC code of err: the code of the first coded error in
// its chain, Canceled or DeadlineExceeded for context errors, OK for nil and
// Unknown otherwise.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.code
	}
	var k *Kind
	if errors.As(err, &k) {
		return k.code
	}
	switch {
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return codes.Unknown
}

// ToStatus converts err into a gRPC status error for a server to return.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(Code(err), err.Error())
}

// FromStatus converts an error from a gRPC call back into a coded error, so
// that errors.Is(err, errs.NotFound) holds for a remote NotFound, and
// errors.Is(err, context.Canceled) for a cancelled call.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	s, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &Error{code: s.Code(), msg: s.Message()}
	switch s.Code() {
	case codes.Canceled:
		e.cause = context.Canceled
	case codes.DeadlineExceeded:
		e.cause = context.DeadlineExceeded
	}
	return e
}
