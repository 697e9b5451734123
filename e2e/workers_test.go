package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	codecremote "github.com/zarrgate/zarrgate/codecsvc/remote"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/remote"
	"github.com/zarrgate/zarrgate/zarr"
)

func TestStoreWorker(t *testing.T) {
	w := startCommand(t, "store-worker", "--root", t.TempDir())
	out, err := grpcurl(t, "", "-plaintext", w.addr, "list")
	if err != nil || !strings.Contains(out, "zarrgate.store.v1.StoreService") || strings.Contains(out, "ArrayService") {
		t.Fatalf("store-worker serves:\n%s %v", out, err)
	}
	cc, err := rpc.DialWorkers(w.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := context.Background()
	s, err := remote.New(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Set(ctx, "a/b", strings.NewReader("value"), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	if v, _, err := storesvc.ReadAll(ctx, s, "a/b"); err != nil || string(v) != "value" {
		t.Fatalf("read back %q, %v", v, err)
	}
}

func TestCodecWorker(t *testing.T) {
	w := startCommand(t, "codec-worker")
	out, err := grpcurl(t, "", "-plaintext", w.addr, "grpc.health.v1.Health/Check")
	if err != nil || !strings.Contains(out, "SERVING") {
		t.Fatalf("health: %v\n%s", err, out)
	}
	cc, err := rpc.DialWorkers(w.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var codecs []zarr.CodecSpec
	json.Unmarshal([]byte(`[{"name":"bytes","configuration":{"endian":"big"}},{"name":"zstd","configuration":{"level":3}},{"name":"crc32c"}]`), &codecs)
	spec := &codec.BatchSpec{Codecs: codecs, Shape: []int64{64}, DataType: zarr.MustDataType("int32")}
	chunks := []codecsvc.Chunk{{Data: bytes.Repeat([]byte{1, 2, 3, 4}, 64)}, {Data: make([]byte, 256)}}
	r := codecremote.New(cc)
	defer r.Close()
	ctx := context.Background()
	enc, err := r.Encode(ctx, spec, chunks)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := r.Decode(ctx, spec, enc)
	if err != nil || !bytes.Equal(dec[0].Data, chunks[0].Data) || !bytes.Equal(dec[1].Data, chunks[1].Data) {
		t.Fatalf("round trip through the worker: %v", err)
	}
	// A worker and a gateway of different builds (the image's libzstd,
	// this test's pure-Go encoder) may encode differently, but each
	// decodes the other's frames.
	local := codecsvc.NewLocal()
	if dec, err := local.Decode(ctx, spec, enc); err != nil || !bytes.Equal(dec[0].Data, chunks[0].Data) || !bytes.Equal(dec[1].Data, chunks[1].Data) {
		t.Fatalf("the worker's frames decoded in process: %v", err)
	}
	mine, err := local.Encode(ctx, spec, chunks)
	if err != nil {
		t.Fatal(err)
	}
	if dec, err := r.Decode(ctx, spec, mine); err != nil || !bytes.Equal(dec[0].Data, chunks[0].Data) || !bytes.Equal(dec[1].Data, chunks[1].Data) {
		t.Fatalf("in-process frames decoded by the worker: %v", err)
	}
}
