package gateway

import (
	"fmt"
	"testing"

	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/internal/shm"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

// TestSharedSendOrder: placed blocks go out in allocation order whatever
// order the workers finish in; empty blocks go at once.
func TestSharedSendOrder(t *testing.T) {
	o := &SharedSegment{}
	var sent []int64
	send := func(b Block) error {
		if !b.Placed {
			sent = append(sent, 100)
		} else {
			sent = append(sent, b.Placement.Offset)
		}
		return nil
	}
	for _, seq := range []uint64{2, 0, 3, 1, 5, 4} {
		if err := o.InOrder(Block{Placed: true, Placement: Placement{Offset: int64(seq), Length: 1, Seq: seq}}, send); err != nil {
			t.Fatal(err)
		}
		if seq == 3 {
			o.InOrder(Block{}, send)
		}
	}
	if fmt.Sprint(sent) != "[0 100 1 2 3 4 5]" {
		t.Fatalf("sent in the order %v", sent)
	}
	if o.Pending() != 0 {
		t.Fatalf("%d blocks still pending", o.Pending())
	}
}

// A block placed in a segment hands its buffer back once, whatever
// becomes of the pieces sent for it: a piece may be the block itself
// (small enough not to be cut), and a read that fails frees the pieces
// still queued. Both freeing the buffer put it in the pool twice, and
// under load two reads then shared one buffer and sent each other's data.
func TestSharedPlaceRecyclesOnce(t *testing.T) {
	if !shm.Supported {
		t.Skip("no shared memory on this platform")
	}
	g := New(memory.New(), testCodecs{}, Config{SharedMemory: true, SharedMemoryBytes: 1 << 20})
	o := g.SharedSegment()
	if o == nil {
		t.Fatal("no segment")
	}
	defer o.Close(false)
	for _, n := range []int{64 << 10, 200 << 10} { // placed whole, and cut
		buf := bufpool.Get(n)
		b := Block{Origin: []int64{0}, Shape: []int64{int64(n / 4)}, Data: buf, release: func() { bufpool.Put(buf) }}
		var pieces []Block
		if err := o.Place(ctx, b, 4, func(p Block) error { pieces = append(pieces, p); return nil }); err != nil {
			t.Fatal(err)
		}
		for _, p := range pieces {
			p.free() // what a failed read's drain does with queued blocks
		}
		o.Release(uint64(len(pieces)))
	}
}

// TestSharedInOrderAllocatesNothing: holding placed blocks back for an
// earlier one allocates nothing per block (a map of Blocks would: they are
// too large to be stored in one in place), on ReadSlabShared's hot path.
func TestSharedInOrderAllocatesNothing(t *testing.T) {
	o := &SharedSegment{}
	send := func(Block) error { return nil }
	seq := uint64(0)
	allocs := testing.AllocsPerRun(100, func() {
		for _, d := range []uint64{1, 0, 3, 2, 6, 4, 5, 7} {
			if err := o.InOrder(Block{Placed: true, Placement: Placement{Length: 1, Seq: seq + d}}, send); err != nil {
				t.Fatal(err)
			}
		}
		seq += 8
	})
	if allocs != 0 || o.Pending() != 0 {
		t.Fatalf("%v allocations per 8 blocks, %d pending", allocs, o.Pending())
	}
}
