package codecsvc

import (
	"errors"
	"testing"

	"github.com/zarrgate/zarrgate/codec"
	"github.com/zarrgate/zarrgate/errs"
)

// coalesceRefs merges only ranges of one value and generation that follow
// each other, up to maxRunBytes a run, and uncoalesceRefs cuts them back;
// a run read short is OutOfRange.
func TestCoalesceRefs(t *testing.T) {
	refs := []codec.Ref{
		{Key: "s", Offset: 0, Length: 10, Generation: "g"},
		{Key: "s", Offset: 10, Length: 5, Generation: "g"},           // follows: merged
		{Key: "s", Offset: 20, Length: 5, Generation: "g"},           // a gap: new run
		{Key: "s", Offset: 25, Length: 5, Generation: "h"},           // another generation
		{Key: "t", Offset: 30, Length: 5, Generation: "h"},           // another key
		{Key: "t", Offset: 35, Length: maxRunBytes, Generation: "h"}, // the run would be too long
		{Key: "t", Offset: 30, Length: 5, Generation: "h"},           // overlapping, backwards
	}
	runs, pieces := coalesceRefs(refs)
	want := []codec.Ref{
		{Key: "s", Offset: 0, Length: 15, Generation: "g"},
		{Key: "s", Offset: 20, Length: 5, Generation: "g"},
		{Key: "s", Offset: 25, Length: 5, Generation: "h"},
		{Key: "t", Offset: 30, Length: 5, Generation: "h"},
		{Key: "t", Offset: 35, Length: maxRunBytes, Generation: "h"},
		{Key: "t", Offset: 30, Length: 5, Generation: "h"},
	}
	if len(runs) != len(want) {
		t.Fatalf("runs %v, want %v", runs, want)
	}
	for i := range want {
		if runs[i] != want[i] {
			t.Fatalf("run %d: %v, want %v", i, runs[i], want[i])
		}
	}
	vals := make([][]byte, len(runs))
	found := make([]bool, len(runs))
	for i, r := range runs {
		vals[i], found[i] = make([]byte, r.Length), true
		for k := range vals[i] {
			vals[i][k] = byte(r.Offset + int64(k))
		}
	}
	out, fout, err := uncoalesceRefs(refs, vals, found, pieces)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range refs {
		if !fout[i] || int64(len(out[i])) != r.Length || out[i][0] != byte(r.Offset) || cap(out[i]) != len(out[i]) {
			t.Fatalf("ref %d %v: %d bytes from %d", i, r, len(out[i]), out[i][0])
		}
	}
	vals[0] = vals[0][:12] // the shard shrank since its index was read
	if _, _, err := uncoalesceRefs(refs, vals, found, pieces); !errors.Is(err, errs.OutOfRange) {
		t.Fatalf("a short run: %v, want OutOfRange", err)
	}
}
