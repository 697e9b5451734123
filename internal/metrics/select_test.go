package metrics

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/zarr"
)

// selectLocal is an engine that takes selections, in process: decode
// whole, then pack.
type selectLocal struct{ *codecsvc.Local }

func (l selectLocal) DecodeSelected(ctx context.Context, spec *codec.BatchSpec, encoded [][]byte, sel []codec.Selection) ([]codec.Chunk, error) {
	out, err := l.Decode(ctx, spec, encoded)
	for i := range out {
		if err == nil && !sel[i].Whole() {
			n, _ := codec.CheckSelection(sel[i], spec.Shape, spec.DataType.Size)
			buf := make([]byte, n)
			codec.Pack(buf, out[i].Data, spec.Shape, spec.DataType.Size, sel[i])
			out[i] = codec.Chunk{Data: buf}
		}
	}
	return out, err
}

// plainEngine is an engine without selections (codec.Engine's methods
// only).
type plainEngine struct{ codec.Engine }

// The measured engine still offers the selections of an engine that
// takes them (the gateway would otherwise decode whole on workers), and
// counts those batches too.
func TestEngineKeepsSelections(t *testing.T) {
	r := New()
	if _, ok := r.Engine(plainEngine{codecsvc.NewLocal()}).(codec.SelectDecoder); ok {
		t.Fatal("an engine without selections offers them measured")
	}
	e, ok := r.Engine(selectLocal{codecsvc.NewLocal()}).(codec.SelectDecoder)
	if !ok {
		t.Fatal("the measured engine hides the selections")
	}
	var cs []zarr.CodecSpec
	json.Unmarshal([]byte(`[{"name":"bytes","configuration":{"endian":"little"}}]`), &cs)
	spec := &codec.BatchSpec{Codecs: cs, Shape: []int64{4}, DataType: zarr.MustDataType("uint8")}
	out, err := e.DecodeSelected(context.Background(), spec, [][]byte{{1, 2, 3, 4}}, []codec.Selection{{Start: []int64{1}, Step: []int64{2}, Count: []int64{2}}})
	if err != nil || string(out[0].Data) != "\x02\x04" {
		t.Fatalf("DecodeSelected: %v %v", out, err)
	}
	fams, err := r.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var batches uint64
	for _, f := range fams {
		if f.GetName() == "zarrgate_codec_batch_duration_seconds" {
			for _, m := range f.GetMetric() {
				batches += m.GetHistogram().GetSampleCount()
			}
		}
	}
	if batches != 1 {
		t.Fatalf("%d batches counted, want 1", batches)
	}
}
