package authzgrpc_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"
	"github.com/zarrgate/zarrgate/internal/authz"
	"github.com/zarrgate/zarrgate/internal/bulk"
)

// openSmallReads opens a small-reads connection (plain TCP, to the
// offer's port on 127.0.0.1).
func openSmallReads(ctx context.Context, c *grpc.ClientConn) (net.Conn, error) {
	resp, err := gatewayv1.NewArrayServiceClient(c).OpenSmallReads(ctx, &gatewayv1.OpenSmallReadsRequest{})
	if err != nil {
		return nil, err
	}
	o := resp.GetOffer()
	return bulk.Dial(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(o.GetPort()))), nil, o.GetTicket())
}

// smallRead makes one read over a small-reads connection and returns its
// status as an error (nil: OK, with a slab).
func smallRead(conn net.Conn, req *gatewayv1.ReadSlabSmallRequest) error {
	if err := bulk.NewWriter(conn).Write(&gatewayv1.SmallReadsRequest{Read: req}, nil); err != nil {
		return err
	}
	frame, err := bulk.NewReader(conn, 0).Next(true)
	if err != nil {
		return err
	}
	var out gatewayv1.SmallReadsResponse
	if err := proto.Unmarshal(frame, &out); err != nil {
		return err
	}
	if c := codes.Code(out.GetCode()); c != codes.OK {
		return status.Error(c, out.GetMessage())
	}
	if out.GetRead().GetHeader() == nil {
		return status.Error(codes.DataLoss, "no slab")
	}
	return nil
}

// TestSmallReadsAuthorizedEachRead: each read over a small-reads
// connection is authorized by the policy in force when it is made, not
// when the connection was opened, and a refusal is audited.
func TestSmallReadsAuthorizedEachRead(t *testing.T) {
	allow, err := authz.Parse([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	deny, err := authz.Parse([]byte(strings.Replace(testPolicy, "prefixes: [data]", "prefixes: [elsewhere]", 1)))
	if err != nil {
		t.Fatal(err)
	}
	var pol atomic.Pointer[authz.Policy]
	pol.Store(allow)
	e := newEnvPolicy(t, "gateway", pol.Load)

	conn, err := openSmallReads(as(alice), e.conn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := smallRead(conn, &gatewayv1.ReadSlabSmallRequest{Path: "data/arr"}); err != nil {
		t.Fatalf("alice's read under the first policy: %v", err)
	}
	if err := smallRead(conn, &gatewayv1.ReadSlabSmallRequest{Path: "other/arr"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice's read of other/arr: %v, want PermissionDenied", err)
	}
	pol.Store(deny)
	if err := smallRead(conn, &gatewayv1.ReadSlabSmallRequest{Path: "data/arr"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("alice's read after the policy took her permission away: %v, want PermissionDenied", err)
	}
	pol.Store(allow)
	if err := smallRead(conn, &gatewayv1.ReadSlabSmallRequest{Path: "data/arr"}); err != nil {
		t.Fatalf("alice's read on the same connection once allowed again: %v", err)
	}
	denied := 0
	for _, r := range e.audit.records(t) {
		if r["principal"] == "user:alice" && r["denied"] == true {
			denied++
		}
	}
	if denied != 2 {
		t.Errorf("%d of alice's reads audited as denied, want 2: %v", denied, e.audit.records(t))
	}
}
