package codecsvc_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/zarrgate/zarrgate/codecsvc"
	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"
	"github.com/zarrgate/zarrgate/internal/membudget"
)

// TestPlainServerProcess runs a codec worker on a plain grpc.NewServer(),
// as a program embedding CodecService outside this module would, with the
// generated client on a plain connection: a Process stream encodes large
// chunks and decodes them back (results sent by reference on zarrgate's
// servers once failed there with "message is wire.ByRef"), every byte
// checked, and every reservation of the budget is released (the results'
// release runs on this path too).
func TestPlainServerProcess(t *testing.T) {
	b := membudget.New(256<<20, 5*time.Second)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	codecsvc.NewBudgetServer(codecsvc.NewLocal(), b).Register(srv)
	go srv.Serve(lis)
	defer srv.Stop()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := codecv1.NewCodecServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Half random (incompressible), half a ramp: encoded sizes above and
	// below wire.Large.
	const n = 1 << 20
	r := rand.New(rand.NewPCG(5, 6))
	var chunks []*codecv1.Chunk
	for i := range 3 {
		d := make([]byte, n)
		for j := range d {
			if i == 0 || j < n/2 {
				d[j] = byte(r.Uint32())
			} else {
				d[j] = byte(j / 4096)
			}
		}
		chunks = append(chunks, &codecv1.Chunk{Data: d})
	}
	spec := protoSpec(t, zstdChain, "uint8", n)
	st, err := c.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&codecv1.ProcessRequest{Id: 1, Work: &codecv1.ProcessRequest_Encode{Encode: &codecv1.EncodeRequest{Spec: spec, Chunks: chunks}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	enc := resp.GetEncode().GetEncoded()
	if resp.GetId() != 1 || len(enc) != len(chunks) {
		t.Fatalf("encode: id %d, %d chunks, error %v", resp.GetId(), len(enc), resp.GetError())
	}
	if err := st.Send(&codecv1.ProcessRequest{Id: 2, Work: &codecv1.ProcessRequest_Decode{Decode: &codecv1.DecodeRequest{Spec: spec, Encoded: enc}}}); err != nil {
		t.Fatal(err)
	}
	if resp, err = st.Recv(); err != nil {
		t.Fatal(err)
	}
	dec := resp.GetDecode().GetChunks()
	if resp.GetId() != 2 || len(dec) != len(chunks) {
		t.Fatalf("decode: id %d, %d chunks, error %v", resp.GetId(), len(dec), resp.GetError())
	}
	for i := range chunks {
		if !bytes.Equal(dec[i].GetData(), chunks[i].GetData()) {
			t.Errorf("chunk %d did not survive encode and decode", i)
		}
	}
	st.CloseSend()
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
	waitIdle(t, b)
}
