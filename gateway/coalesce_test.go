package gateway

import (
	"fmt"
	"testing"

	"github.com/zarrgate/zarrgate/storesvc"
)

func TestCoalesce(t *testing.T) {
	b := storesvc.Bounded
	reqs := []storesvc.KeyRange{
		{Key: "s", Range: b(0, 10)}, {Key: "s", Range: b(10, 5)}, {Key: "s", Range: b(15, 1)}, // one run
		{Key: "s", Range: b(100, 4)},            // a gap
		{Key: "s", Range: b(90, 10)},            // out of order
		{Key: "t", Range: b(94, 3)},             // another key
		{Key: "t", Range: b(97, maxBatchBytes)}, // too long to join
	}
	runs, pieces := coalesce(reqs)
	want := "[{s [0:16]} {s [100:104]} {s [90:100]} {t [94:97]} {t [97:8388705]}]"
	if got := fmt.Sprint(runs); got != want {
		t.Fatalf("runs = %s, want %s", got, want)
	}
	var vals []storesvc.PartialValue
	for _, r := range runs {
		off, n := r.Range.Parts()
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(off + int64(i))
		}
		vals = append(vals, storesvc.PartialValue{Data: data, Found: true, Generation: r.Key})
	}
	got, err := uncoalesce("s", vals, pieces)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		off, n := r.Range.Parts()
		if int64(len(got[i].Data)) != n || got[i].Data[0] != byte(off) || got[i].Generation != r.Key || cap(got[i].Data) != len(got[i].Data) {
			t.Errorf("range %d (%v): got %d bytes starting %d", i, r, len(got[i].Data), got[i].Data[0])
		}
	}
	vals[0].Data = vals[0].Data[:15]
	if _, err := uncoalesce("s", vals, pieces); err == nil {
		t.Error("a short run read: no error")
	}
}
