package rpc

import (
	"context"
	"testing"

	"github.com/zarrgate/zarrgate/internal/tracing"
)

// TestRequestIDOfALocalCall: a local call (no gRPC stream in its context)
// costs the request-id interceptor nothing. Asking gRPC to set the header
// anyway fails with an error that prints the whole context: allocations
// on every small read.
func TestRequestIDOfALocalCall(t *testing.T) {
	ctx := tracing.WithRequestID(context.Background(), "a-request-id")
	handler := func(ctx context.Context, req any) (any, error) { return req, nil }
	if n := testing.AllocsPerRun(100, func() { requestIDUnary(ctx, nil, nil, handler) }); n != 0 {
		t.Errorf("the request-id interceptor allocates %.0f times per local call, want none", n)
	}
}
