package storeserver_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"

	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/storesvc/storeserver"
)

// rawCodec sends pre-encoded protobuf bytes as they are, so that a test can
// send what no well-behaved protobuf library would marshal (invalid UTF-8
// in a string field, garbage), and receives into a *rawMsg.
type rawCodec struct{}

type rawMsg []byte

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*rawMsg))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*rawMsg) = data.Materialize()
	return nil
}

// bytesField encodes one length-delimited field.
func bytesField(num protowire.Number, b []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
}

// serveStore serves a file store in dir through the real server stack
// (rpc.NewServer: interceptors, wire codec) on loopback TCP.
func serveStore(t *testing.T, dir string) *grpc.ClientConn {
	t.Helper()
	backend, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	storeserver.New(backend).Register(srv)
	go srv.Serve(lis)
	cc, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		srv.Stop()
		backend.Close()
	})
	return cc
}

// recvAll drains a server stream and returns its final error (nil for a
// clean end).
func recvAll[T any](s grpc.ServerStreamingClient[T], err error) error {
	if err != nil {
		return err
	}
	for {
		if _, err := s.Recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// TestServerCodes sends every class of bad input to a StoreService over the
// real server stack and checks the status code of each, then that the
// server still serves. Client input never gets Internal or Unknown.
func TestServerCodes(t *testing.T) {
	dir := t.TempDir()
	cc := serveStore(t, dir)
	c := storev1.NewStoreServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	set := func(key string, data ...[]byte) error {
		s, err := c.Set(ctx)
		if err != nil {
			return err
		}
		if err := s.Send(&storev1.SetRequest{Header: &storev1.SetHeader{Key: key}}); err != nil {
			return err
		}
		for _, d := range data {
			if err := s.Send(&storev1.SetRequest{Data: d}); err != nil {
				break // the server ended the call; CloseAndRecv says why
			}
		}
		_, err = s.CloseAndRecv()
		return err
	}
	if err := set("a/v", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	// A temporary file as a killed write leaves it.
	tmp := filepath.Join(dir, "a", ".zarrgate-tmp-0123456789abcdef")
	if err := os.WriteFile(tmp, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}

	long := strings.Repeat("s", 256)
	// rawUnary calls a unary method with hand-encoded bytes.
	rawUnary := func(method string, req []byte) error {
		in, out := rawMsg(req), rawMsg(nil)
		return cc.Invoke(ctx, "/zarrgate.store.v1.StoreService/"+method, &in, &out, grpc.ForceCodecV2(rawCodec{}))
	}
	// rawStream opens a stream with a hand-made descriptor, sends msgs
	// and closes its side, then reads to the end.
	rawStream := func(method string, msgs ...[]byte) error {
		desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
		s, err := cc.NewStream(ctx, desc, "/zarrgate.store.v1.StoreService/"+method, grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			return err
		}
		for _, m := range msgs {
			in := rawMsg(m)
			if err := s.SendMsg(&in); err != nil {
				break
			}
		}
		s.CloseSend()
		for {
			var out rawMsg
			if err := s.RecvMsg(&out); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
		}
	}
	badUTF8 := bytesField(1, []byte("a/\xff\xfe"))

	cases := []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"Get empty key", func() error { return recvAll(c.Get(ctx, &storev1.GetRequest{})) }, codes.InvalidArgument},
		{"Get segment over 255 bytes", func() error { return recvAll(c.Get(ctx, &storev1.GetRequest{Key: "a/" + long})) }, codes.InvalidArgument},
		{"Get key over 1024 bytes", func() error {
			return recvAll(c.Get(ctx, &storev1.GetRequest{Key: strings.Repeat("k/", 600) + "k"}))
		}, codes.InvalidArgument},
		{"Get non-UTF-8 key", func() error { return rawStream("Get", badUTF8) }, codes.InvalidArgument},
		{"Get garbage message", func() error { return rawStream("Get", []byte{0xff, 0xff, 0xff}) }, codes.InvalidArgument},
		{"Get temp file", func() error {
			return recvAll(c.Get(ctx, &storev1.GetRequest{Key: "a/.zarrgate-tmp-0123456789abcdef"}))
		}, codes.InvalidArgument},
		{"Get range too large", func() error {
			return recvAll(c.Get(ctx, &storev1.GetRequest{Key: "a/v", Range: &storev1.ByteRange{Range: &storev1.ByteRange_FromOffset{FromOffset: 1 << 63}}}))
		}, codes.InvalidArgument},
		{"Get range past the end", func() error {
			return recvAll(c.Get(ctx, &storev1.GetRequest{Key: "a/v", Range: &storev1.ByteRange{Range: &storev1.ByteRange_FromOffset{FromOffset: 11}}}))
		}, codes.OutOfRange},
		{"Get of a prefix", func() error { return recvAll(c.Get(ctx, &storev1.GetRequest{Key: "a"})) }, codes.NotFound},
		{"Get below a value", func() error { return recvAll(c.Get(ctx, &storev1.GetRequest{Key: "a/v/w"})) }, codes.NotFound},
		{"GetPartialValues non-UTF-8 key", func() error {
			return rawStream("GetPartialValues", bytesField(1, badUTF8))
		}, codes.InvalidArgument},
		{"GetPartialValues segment over 255 bytes", func() error {
			return recvAll(c.GetPartialValues(ctx, &storev1.GetPartialValuesRequest{Ranges: []*storev1.KeyRange{{Key: long}}}))
		}, codes.InvalidArgument},
		{"Set closed before the header", func() error {
			s, err := c.Set(ctx)
			if err != nil {
				return err
			}
			_, err = s.CloseAndRecv()
			return err
		}, codes.InvalidArgument},
		{"Set data before the header", func() error {
			s, err := c.Set(ctx)
			if err != nil {
				return err
			}
			s.Send(&storev1.SetRequest{Data: []byte("x")})
			_, err = s.CloseAndRecv()
			return err
		}, codes.InvalidArgument},
		{"Set second header", func() error {
			s, err := c.Set(ctx)
			if err != nil {
				return err
			}
			s.Send(&storev1.SetRequest{Header: &storev1.SetHeader{Key: "b"}, Data: []byte("x")})
			s.Send(&storev1.SetRequest{Header: &storev1.SetHeader{Key: "c"}})
			_, err = s.CloseAndRecv()
			return err
		}, codes.InvalidArgument},
		{"Set segment over 255 bytes", func() error { return set("a/"+long, []byte("x")) }, codes.InvalidArgument},
		{"Set non-UTF-8 key", func() error { return rawStream("Set", bytesField(1, badUTF8)) }, codes.InvalidArgument},
		{"Set temp name", func() error { return set("a/.zarrgate-tmp-0123456789abcdef", []byte("x")) }, codes.InvalidArgument},
		{"Set below a value", func() error { return set("a/v/w", []byte("x")) }, codes.FailedPrecondition},
		{"Set over a prefix", func() error { return set("a", []byte("x")) }, codes.FailedPrecondition},
		{"Set generation mismatch", func() error {
			s, _ := c.Set(ctx)
			s.Send(&storev1.SetRequest{Header: &storev1.SetHeader{Key: "a/v", Condition: &storev1.Condition{Condition: &storev1.Condition_IfGenerationMatch{IfGenerationMatch: "nope"}}}})
			_, err := s.CloseAndRecv()
			return err
		}, codes.FailedPrecondition},
		{"SetPartialValues non-UTF-8 key", func() error {
			return rawUnary("SetPartialValues", bytesField(1, badUTF8))
		}, codes.InvalidArgument},
		{"SetPartialValues offset too large", func() error {
			_, err := c.SetPartialValues(ctx, &storev1.SetPartialValuesRequest{Writes: []*storev1.PartialWrite{{Key: "a/v", Offset: 1<<62 + 1}}})
			return err
		}, codes.InvalidArgument},
		{"SetPartialValues past the end", func() error {
			_, err := c.SetPartialValues(ctx, &storev1.SetPartialValuesRequest{Writes: []*storev1.PartialWrite{{Key: "a/v", Offset: 1 << 40, Data: []byte("x")}}})
			return err
		}, codes.OutOfRange},
		{"SetPartialValues overlapping", func() error {
			_, err := c.SetPartialValues(ctx, &storev1.SetPartialValuesRequest{Writes: []*storev1.PartialWrite{{Key: "a/v", Data: []byte("xx")}, {Key: "a/v", Offset: 1, Data: []byte("y")}}})
			return err
		}, codes.InvalidArgument},
		{"SetPartialValues missing key", func() error {
			_, err := c.SetPartialValues(ctx, &storev1.SetPartialValuesRequest{Writes: []*storev1.PartialWrite{{Key: "missing/k", Data: []byte("x")}}})
			return err
		}, codes.NotFound},
		{"SetPartialValues temp file", func() error {
			_, err := c.SetPartialValues(ctx, &storev1.SetPartialValuesRequest{Writes: []*storev1.PartialWrite{{Key: "a/.zarrgate-tmp-0123456789abcdef", Data: []byte("x")}}})
			return err
		}, codes.InvalidArgument},
		{"SetPartialValues segment over 255 bytes", func() error {
			_, err := c.SetPartialValues(ctx, &storev1.SetPartialValuesRequest{Writes: []*storev1.PartialWrite{{Key: long, Data: []byte("x")}}})
			return err
		}, codes.InvalidArgument},
		{"Erase if_absent", func() error {
			_, err := c.Erase(ctx, &storev1.EraseRequest{Key: "a/v", Condition: &storev1.Condition{Condition: &storev1.Condition_IfAbsent{IfAbsent: true}}})
			return err
		}, codes.InvalidArgument},
		{"Erase temp file", func() error {
			_, err := c.Erase(ctx, &storev1.EraseRequest{Key: "a/.zarrgate-tmp-0123456789abcdef"})
			return err
		}, codes.InvalidArgument},
		{"Erase segment over 255 bytes", func() error {
			_, err := c.Erase(ctx, &storev1.EraseRequest{Key: "a/" + long})
			return err
		}, codes.InvalidArgument},
		{"Erase non-UTF-8 key", func() error { return rawUnary("Erase", badUTF8) }, codes.InvalidArgument},
		{"EraseValues segment over 255 bytes", func() error {
			_, err := c.EraseValues(ctx, &storev1.EraseValuesRequest{Keys: []string{"a/" + long}})
			return err
		}, codes.InvalidArgument},
		{"ErasePrefix without slash", func() error {
			_, err := c.ErasePrefix(ctx, &storev1.ErasePrefixRequest{Prefix: "a"})
			return err
		}, codes.InvalidArgument},
		{"ErasePrefix segment over 255 bytes", func() error {
			_, err := c.ErasePrefix(ctx, &storev1.ErasePrefixRequest{Prefix: long + "/"})
			return err
		}, codes.InvalidArgument},
		{"ErasePrefix temp name", func() error {
			_, err := c.ErasePrefix(ctx, &storev1.ErasePrefixRequest{Prefix: ".zarrgate-tmp-x/"})
			return err
		}, codes.InvalidArgument},
		{"ListPrefix segment over 255 bytes", func() error {
			return recvAll(c.ListPrefix(ctx, &storev1.ListPrefixRequest{Prefix: long + "/"}))
		}, codes.InvalidArgument},
		{"ListPrefix non-UTF-8", func() error { return rawStream("ListPrefix", badUTF8) }, codes.InvalidArgument},
		{"ListDir without slash", func() error {
			return recvAll(c.ListDir(ctx, &storev1.ListDirRequest{Prefix: "a"}))
		}, codes.InvalidArgument},
		{"unknown method", func() error { return rawUnary("Frobnicate", nil) }, codes.Unimplemented},
	}
	for _, tc := range cases {
		err := tc.call()
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s: code %v (%v), want %v", tc.name, got, err, tc.want)
		}
	}

	// Still serving, and the temp file never shows in listings.
	var keys []string
	ls, err := c.ListPrefix(ctx, &storev1.ListPrefixRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m, err := ls.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, m.GetKeys()...)
	}
	if fmt.Sprint(keys) != "[a/v]" {
		t.Errorf("keys after the bad calls: %q, want [a/v]", keys)
	}
}
