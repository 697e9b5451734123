// Package grpcerr is where zarrgate's errors meet gRPC: the transport edge
// of package errs. Servers turn errors into statuses with ToStatus; clients
// turn statuses back into errors with FromStatus, so that a remote error
// compares with errors.Is to the same sentinel as the local one
// (errs.NotFound, zarr.ErrInvalid, context.Canceled). errs itself knows no
// transport; its codes have gRPC's numbers, so the conversion is by number.
package grpcerr

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/errs"
)

// Code returns the gRPC code of err: errs.CodeOf's code when err (or its
// chain) carries one or is a context error, the status's code when err is
// a gRPC status error, OK for nil and Unknown otherwise.
func Code(err error) codes.Code {
	if c := errs.CodeOf(err); c != errs.CodeUnknown {
		return codes.Code(c)
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
// errors.Is(err, context.Canceled) for a cancelled call. The error is still
// the status for grpc-go's status package (status.Code, status.FromError),
// as callers of the Go client may read it that way. An error that is not a
// status is returned as it is.
func FromStatus(err error) error {
	if err == nil {
		return nil
	}
	s, ok := status.FromError(err)
	if !ok {
		return err
	}
	var cause error
	switch s.Code() {
	case codes.Canceled:
		cause = context.Canceled
	case codes.DeadlineExceeded:
		cause = context.DeadlineExceeded
	}
	return &remoteError{err: errs.WithCode(errs.Code(s.Code()), s.Message(), cause), st: s}
}

// remoteError is an error rebuilt from a status: an errs error (errors.Is,
// errs.CodeOf) that also still is the status. errs' own errors carried a
// GRPCStatus method until errs stopped knowing gRPC; remote errors keep it
// here, at the edge.
type remoteError struct {
	err error
	st  *status.Status
}

func (e *remoteError) Error() string { return e.err.Error() }

// Unwrap returns the errs error, which holds the code and the cause.
func (e *remoteError) Unwrap() error { return e.err }

// GRPCStatus lets grpc-go's status package read the error as the status it
// came from.
func (e *remoteError) GRPCStatus() *status.Status { return e.st }
