package storeserver_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"

	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/storesvc/internal/storeproto"
	"github.com/zarrgate/zarrgate/storesvc/storeserver"
)

// servePlain serves a file store in dir on a plain grpc.NewServer(), as a
// program embedding StoreService outside this module would, and dials it
// with a plain client: gRPC's own proto codec on both sides.
func servePlain(t *testing.T, dir string) storev1.StoreServiceClient {
	t.Helper()
	backend, err := file.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	storeserver.New(backend).Register(srv)
	go srv.Serve(lis)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		srv.Stop()
		backend.Close()
	})
	return storev1.NewStoreServiceClient(cc)
}

// TestPlainServerGetPartialValues reads small and large values (large ones
// are sent by reference on zarrgate's own servers, and once failed on a
// plain server with "message is wire.ByRef"), whole and in ranges, through
// a StoreService on a plain gRPC server, and checks every byte.
func TestPlainServerGetPartialValues(t *testing.T) {
	for _, name := range []string{"plain", "zarrgate"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			var c storev1.StoreServiceClient
			if name == "plain" {
				c = servePlain(t, dir)
			} else {
				c = storev1.NewStoreServiceClient(serveStore(t, dir))
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r := rand.New(rand.NewPCG(1, 2))
			values := map[string][]byte{}
			for i, size := range []int{0, 10, 40 << 10, storeproto.FrameSize + 12345, 3 << 20} {
				key := fmt.Sprintf("v/%d", i)
				v := make([]byte, size)
				for j := range v {
					v[j] = byte(r.Uint32())
				}
				values[key] = v
				s, err := c.Set(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Send(&storev1.SetRequest{Header: &storev1.SetHeader{Key: key}}); err != nil {
					t.Fatal(err)
				}
				for off := 0; off < len(v); off += 1 << 20 {
					if err := s.Send(&storev1.SetRequest{Data: v[off:min(off+1<<20, len(v))]}); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := s.CloseAndRecv(); err != nil {
					t.Fatal(err)
				}
			}
			type want struct {
				key     string
				data    []byte
				missing bool
			}
			var reqs []*storev1.KeyRange
			var wants []want
			for i := range 5 {
				key := fmt.Sprintf("v/%d", i)
				v := values[key]
				reqs = append(reqs, &storev1.KeyRange{Key: key})
				wants = append(wants, want{key: key, data: v})
				if len(v) > 100 {
					off, n := len(v)/3, len(v)/2
					reqs = append(reqs,
						&storev1.KeyRange{Key: key, Range: &storev1.ByteRange{Range: &storev1.ByteRange_Bounded_{Bounded: &storev1.ByteRange_Bounded{Offset: uint64(off), Length: uint64(n)}}}},
						&storev1.KeyRange{Key: key, Range: &storev1.ByteRange{Range: &storev1.ByteRange_SuffixLength{SuffixLength: uint64(len(v) / 4)}}})
					wants = append(wants, want{key: key, data: v[off : off+n]}, want{key: key, data: v[len(v)-len(v)/4:]})
				}
			}
			reqs = append(reqs, &storev1.KeyRange{Key: "absent"})
			wants = append(wants, want{key: "absent", missing: true})

			s, err := c.GetPartialValues(ctx, &storev1.GetPartialValuesRequest{Ranges: reqs})
			if err != nil {
				t.Fatal(err)
			}
			got := make([][]byte, len(reqs))
			done := make([]bool, len(reqs))
			missing := make([]bool, len(reqs))
			for {
				resp, err := s.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range resp.GetParts() {
					i := p.GetIndex()
					if int(i) >= len(reqs) || done[i] {
						t.Fatalf("part for index %d unexpected", i)
					}
					got[i] = append(got[i], p.GetData()...)
					missing[i] = p.GetMissing()
					done[i] = p.GetLast()
				}
			}
			for i, w := range wants {
				if !done[i] || missing[i] != w.missing || !bytes.Equal(got[i], w.data) {
					t.Errorf("request %d (%s): done %v missing %v, %d bytes; want missing %v, %d bytes (equal: %v)",
						i, w.key, done[i], missing[i], len(got[i]), w.missing, len(w.data), bytes.Equal(got[i], w.data))
				}
			}
		})
	}
}
