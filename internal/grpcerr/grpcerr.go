// Package grpcerr is where zarrgate's errors meet gRPC: the transport edge
// of package errs. Servers turn errors into statuses with ToStatus; clients
// turn statuses back into errors with FromStatus, so that a remote error
// compares with errors.Is to the same sentinel as the local one
// (errs.NotFound, zarr.ErrInvalid, context.Canceled). errs itself knows no
// transport; its codes have gRPC's numbers, so the conversion is by number.
package grpcerr

import (
	"context"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/internal/retrybudget"

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
	st := status.New(Code(err), err.Error())
	if retrybudget.Retried(err) {
		// The hop below already retried this error (within its budget):
		// say so, so that the hop above does not retry it again.
		if d, derr := st.WithDetails(retriedInfo); derr == nil {
			st = d
		}
	}
	return st.Err()
}

// retriedInfo is the status detail of an error that its server already
// retried: clients (ours, and any that read google.rpc.ErrorInfo) should
// not retry it again, or retries multiply hop by hop.
var retriedInfo = &errdetails.ErrorInfo{Reason: "RETRIED", Domain: "zarrgate"}

// Retried reports whether err, a status error from a call, says the server
// already retried it: a client should not retry it again.
func Retried(err error) bool {
	s, ok := status.FromError(err)
	return ok && retried(s)
}

// retried reports whether a status carries retriedInfo.
func retried(s *status.Status) bool {
	for _, d := range s.Details() {
		if e, ok := d.(*errdetails.ErrorInfo); ok && e.GetDomain() == retriedInfo.Domain && e.GetReason() == retriedInfo.Reason {
			return true
		}
	}
	return false
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
	return &remoteError{err: errs.WithCode(errs.Code(s.Code()), s.Message(), cause), st: s, retried: retried(s)}
}

// remoteError is an error rebuilt from a status: an errs error (errors.Is,
// errs.CodeOf) that also still is the status. errs' own errors carried a
// GRPCStatus method until errs stopped knowing gRPC; remote errors keep it
// here, at the edge.
type remoteError struct {
	err     error
	st      *status.Status
	retried bool
}

// RetriedBelow reports that the server already retried the error
// (retrybudget.Retried reads it).
func (e *remoteError) RetriedBelow() bool { return e.retried }

func (e *remoteError) Error() string { return e.err.Error() }

// Unwrap returns the errs error, which holds the code and the cause.
func (e *remoteError) Unwrap() error { return e.err }

// GRPCStatus lets grpc-go's status package read the error as the status it
// came from.
func (e *remoteError) GRPCStatus() *status.Status { return e.st }
