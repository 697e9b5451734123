package grpcerr_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/zarr"
)

// TestCodesMatchGRPC holds errs' codes equal to gRPC's, number and name:
// the conversion at the edge is by number.
func TestCodesMatchGRPC(t *testing.T) {
	for c := errs.CodeOK; c <= errs.CodeUnauthenticated+1; c++ {
		if got, want := c.String(), codes.Code(c).String(); got != want {
			t.Errorf("errs code %d is %q, gRPC's is %q", uint32(c), got, want)
		}
	}
	// the last code both know; the one after it is unnamed in both (above)
	if codes.Code(errs.CodeUnauthenticated) != codes.Unauthenticated {
		t.Errorf("errs.CodeUnauthenticated = %d, gRPC's Unauthenticated = %d", errs.CodeUnauthenticated, codes.Unauthenticated)
	}
}

func TestCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{nil, codes.OK},
		{errors.New("boom"), codes.Unknown},
		{errs.New(errs.NotFound, "x"), codes.NotFound},
		{context.Canceled, codes.Canceled},
		{status.Error(codes.Aborted, "raw status"), codes.Aborted},
		{fmt.Errorf("call: %w", status.Error(codes.ResourceExhausted, "raw status")), codes.ResourceExhausted},
		{status.Error(codes.Unknown, "unknown status"), codes.Unknown},
		{fmt.Errorf("parse: %w", zarr.ErrUnsupported), codes.Unimplemented},
	} {
		if got := grpcerr.Code(tc.err); got != tc.want {
			t.Errorf("Code(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if grpcerr.ToStatus(nil) != nil || grpcerr.FromStatus(nil) != nil {
		t.Error("nil does not stay nil")
	}
	plain := errors.New("not a status")
	if grpcerr.FromStatus(plain) != plain {
		t.Error("FromStatus changed an error that is not a status")
	}
}

// TestAcrossTheWire sends errors through a real gRPC call (in memory) and
// checks that the client's rebuilt error has the code, the message and the
// sentinels of the server's.
func TestAcrossTheWire(t *testing.T) {
	_, zarrErr := zarr.ParseV3([]byte("{"))
	_, zarrUnsupported := zarr.ParseDataType("datetime64")
	serverErrs := map[string]error{
		"notfound":    errs.New(errs.NotFound, "key %q not found", "a/zarr.json"),
		"zarr":        fmt.Errorf("open a: %w", zarrErr),
		"unsupported": zarrUnsupported,
		"canceled":    fmt.Errorf("read: %w", context.Canceled),
		"plain":       errors.New("a plain error"),
		"unauth":      errs.New(errs.Unauthenticated, "no token"),
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		m, _ := grpc.MethodFromServerStream(stream)
		if m == "/t.T/slow" {
			<-stream.Context().Done()
			return grpcerr.ToStatus(stream.Context().Err())
		}
		return grpcerr.ToStatus(serverErrs[strings.TrimPrefix(m, "/t.T/")])
	}))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	call := func(ctx context.Context, method string) error {
		return grpcerr.FromStatus(cc.Invoke(ctx, "/t.T/"+method, &emptypb.Empty{}, &emptypb.Empty{}))
	}
	ctx := context.Background()
	for _, tc := range []struct {
		method string
		code   codes.Code
		is     []error
		isNot  []error
	}{
		{"notfound", codes.NotFound, []error{errs.NotFound}, []error{errs.InvalidArgument, zarr.ErrInvalid}},
		{"zarr", codes.InvalidArgument, []error{errs.InvalidArgument, zarr.ErrInvalid}, []error{zarr.ErrUnsupported, errs.Unimplemented}},
		{"unsupported", codes.Unimplemented, []error{errs.Unimplemented, zarr.ErrUnsupported}, []error{zarr.ErrInvalid}},
		{"canceled", codes.Canceled, []error{context.Canceled}, []error{context.DeadlineExceeded}},
		{"plain", codes.Unknown, nil, []error{errs.Internal, zarr.ErrInternal}},
		{"unauth", codes.Unauthenticated, []error{errs.Unauthenticated}, nil},
	} {
		err := call(ctx, tc.method)
		if err == nil {
			t.Fatalf("%s: no error", tc.method)
		}
		if got := grpcerr.Code(err); got != tc.code {
			t.Errorf("%s: code %v, want %v (%v)", tc.method, got, tc.code, err)
		}
		if got := status.Code(err); got != tc.code {
			t.Errorf("%s: status.Code %v, want %v (%v)", tc.method, got, tc.code, err)
		}
		if got := errs.CodeOf(err); codes.Code(got) != tc.code {
			t.Errorf("%s: errs.CodeOf %v, want %v (%v)", tc.method, got, tc.code, err)
		}
		if want := serverErrs[tc.method].Error(); err.Error() != want {
			t.Errorf("%s: message %q, want %q", tc.method, err, want)
		}
		for _, target := range tc.is {
			if !errors.Is(err, target) {
				t.Errorf("%s: errors.Is(%v, %v) is false", tc.method, err, target)
			}
		}
		for _, target := range tc.isNot {
			if errors.Is(err, target) {
				t.Errorf("%s: errors.Is(%v, %v) is true", tc.method, err, target)
			}
		}
	}
	// the client's own cancellation and deadline
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	if err := call(cctx, "slow"); !errors.Is(err, context.Canceled) || errs.CodeOf(err) != errs.CodeCanceled {
		t.Errorf("cancelled call: %v (%v)", err, errs.CodeOf(err))
	}
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := call(dctx, "slow"); !errors.Is(err, context.DeadlineExceeded) || grpcerr.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call past its deadline: %v (%v)", err, grpcerr.Code(err))
	}
}
