package rpc_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/auth/authgrpc"
	"github.com/zarrgate/zarrgate/internal/rpc"
)

// The access log line of each call names the authenticated caller (the
// interceptors that authenticate run after the access log's), its status,
// its bytes, and carries the request id that the response header returns
// and that the handler's own log lines carry too. A call refused by
// authentication gets a request id too, and its line says anonymous.
func TestAccessLogPrincipalAndRequestID(t *testing.T) {
	const token = "s3cret-token-for-alice"
	line, err := auth.TokenLine(auth.HashToken(token), "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	toks, err := auth.ParseTokens(strings.NewReader(line + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuf{}
	logger := slog.New(rpc.LogHandler(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	srv := rpc.NewServer(logger, authgrpc.ServerOptions(&auth.Authenticator{Tokens: func() *auth.Tokens { return toks }})...)
	srv.RegisterService(testService(func(ctx context.Context) error {
		logger.InfoContext(ctx, "in the handler")
		return nil
	}), struct{}{})
	cc := listenAndDial(t, srv)

	authed := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	var hdr metadata.MD
	if err := cc.Invoke(authed, "/test.Svc/Unary", new(emptypb.Empty), new(emptypb.Empty), grpc.Header(&hdr)); err != nil {
		t.Fatal(err)
	}
	ids := hdr.Get("x-request-id")
	if len(ids) != 1 || len(ids[0]) != 32 {
		t.Fatalf("x-request-id header %v, want one 32-hex-digit id", ids)
	}
	s, err := cc.NewStream(authed, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/test.Svc/Stream")
	if err != nil {
		t.Fatal(err)
	}
	s.SendMsg(new(emptypb.Empty))
	s.CloseSend()
	s.RecvMsg(new(emptypb.Empty))
	shdr, _ := s.Header()
	// A failed call returns its id in the trailer, not a header: a header
	// would commit the call, so a client's gRPC retry policy could not
	// repeat it.
	var hdr2, trl2 metadata.MD
	err = cc.Invoke(context.Background(), "/test.Svc/Unary", new(emptypb.Empty), new(emptypb.Empty), grpc.Header(&hdr2), grpc.Trailer(&trl2))
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("call without a token: %v", err)
	}
	// A call's access line is written when the call's goroutine ends,
	// which may be just after the client has its answer (and after Stop
	// returns): wait for the three.
	srv.Stop()
	for deadline := time.Now().Add(5 * time.Second); strings.Count(logs.String(), `"msg":"finished call"`) < 3 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}

	byID := map[string][]map[string]any{}
	for l := range strings.Lines(logs.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %s", l)
		}
		id, _ := m["request_id"].(string)
		byID[id] = append(byID[id], m)
	}
	check := func(id, method, principal, code string) {
		t.Helper()
		var access, inside int
		for _, m := range byID[id] {
			switch m["msg"] {
			case "in the handler":
				inside++
			case "finished call":
				access++
				if m["grpc.method"] != method || m["principal"] != principal || m["grpc.code"] != code || m["grpc.service"] != "test.Svc" {
					t.Errorf("access line of %s: %v", method, m)
				}
				if code == "OK" && (m["bytes_received"] == nil || m["bytes_sent"] == nil) {
					t.Errorf("access line of %s without bytes: %v", method, m)
				}
			}
		}
		if access != 1 || (code == "OK" && inside != 1) {
			t.Errorf("request %s (%s): %d access lines, %d handler lines; want 1 and 1:\n%s", id, method, access, inside, logs)
		}
	}
	check(ids[0], "Unary", "alice", "OK")
	if v := shdr.Get("x-request-id"); len(v) != 1 {
		t.Errorf("stream header %v", shdr)
	} else {
		check(v[0], "Stream", "alice", "OK")
	}
	if len(hdr2) != 0 {
		t.Errorf("a refused call sent a header: %v", hdr2)
	}
	if v := trl2.Get("x-request-id"); len(v) != 1 {
		t.Errorf("a call refused by authentication has no request id in its trailer: %v", trl2)
	} else {
		check(v[0], "Unary", "anonymous", "Unauthenticated")
	}
}

// A caller's own x-request-id is the call's id when it is acceptable, and
// replaced by a fresh one when not.
func TestCallerRequestID(t *testing.T) {
	cc, _ := serve(t, func(context.Context) error { return nil }, nil)
	for _, tc := range []struct{ sent, want string }{
		{"job-17", "job-17"},
		{"has space", ""},
		{strings.Repeat("x", 129), ""},
	} {
		var hdr metadata.MD
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-request-id", tc.sent)
		if err := cc.Invoke(ctx, "/test.Svc/Unary", new(emptypb.Empty), new(emptypb.Empty), grpc.Header(&hdr)); err != nil {
			t.Fatal(err)
		}
		got := hdr.Get("x-request-id")
		switch {
		case len(got) != 1:
			t.Errorf("sent %q: x-request-id header %v", tc.sent, got)
		case tc.want != "" && got[0] != tc.want:
			t.Errorf("sent %q: got %q back", tc.sent, got[0])
		case tc.want == "" && (got[0] == tc.sent || len(got[0]) != 32):
			t.Errorf("sent %q: got %q back, want a fresh 32-hex-digit id", tc.sent, got[0])
		}
	}
}
