package codecsvc

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/zarr"
)

// Defect 2 of issue 12: a 17-byte zstd frame claiming 2^39 bytes, for a
// chunk of 2^40 uint8, crashed the codec worker (fatal: out of memory).
// The chunk is now refused for its size before anything is allocated.
func TestZstdBombHugeChunk(t *testing.T) {
	frame := zstdFrameClaiming(t, 1<<39)
	spec := &BatchSpec{Codecs: []zarr.CodecSpec{{Name: "bytes"}, {Name: "zstd", Configuration: json.RawMessage(`{"level":3}`)}},
		Shape: []int64{1 << 40}, DataType: zarr.MustDataType("uint8")}
	a0 := heapAlloc()
	_, err := NewLocal().Decode(context.Background(), spec, [][]byte{frame})
	if err == nil {
		t.Fatal("decoded a 2^40-byte chunk")
	}
	if !errors.Is(err, errs.ResourceExhausted) {
		t.Errorf("2^40-byte chunk: %v, want ResourceExhausted", err)
	}
	if a := heapAlloc() - a0; a > 1<<20 {
		t.Errorf("refusing it allocated %d KiB", a>>10)
	}
}
