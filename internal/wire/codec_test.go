package wire

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/grpc/mem"
	protobuf "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"
	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"
)

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// sizes mixes small values, values right at the threshold and large ones.
var sizes = []int{0, 1, 100, Large - 1, Large, Large + 1, 1 << 20}

func messages(r *rand.Rand) []protobuf.Message {
	var out []protobuf.Message
	for _, n := range sizes {
		blk := &gatewayv1.Block{Origin: []uint64{1, 2, 3}, Shape: []uint64{4, 5, 6}, Data: randBytes(r, n), Offsets: []uint64{0, uint64(n)}}
		out = append(out,
			&gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Block{Block: blk}},
			&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Block{Block: blk}},
			&gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Header{Header: &gatewayv1.SlabHeader{Shape: []uint64{uint64(n)}, DataType: "float32"}}},
		)
		// Repeated bytes and repeated messages mixing small and large
		// values keep their order.
		enc := &codecv1.EncodeResponse{}
		dec := &codecv1.DecodeRequest{}
		for _, m := range sizes {
			enc.Encoded = append(enc.Encoded, randBytes(r, (m+n)%(2<<20)))
			dec.Encoded = append(dec.Encoded, randBytes(r, m))
		}
		out = append(out, enc, dec)
	}
	return out
}

// TestRoundTrips checks that the codec's bytes decode with the stock codec
// and the stock codec's bytes with this one, to equal messages.
func TestRoundTrips(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i, m := range messages(r) {
		ours, err := Codec.Marshal(ByRef{Msg: m})
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := stock.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if ours.Len() != theirs.Len() {
			t.Errorf("message %d: %d bytes, stock codec %d", i, ours.Len(), theirs.Len())
		}
		for name, pair := range map[string]struct {
			data mem.BufferSlice
			dec  func(mem.BufferSlice, any) error
		}{
			"ours→stock": {ours, stock.Unmarshal},
			"ours→ours":  {ours, Codec.Unmarshal},
			"stock→ours": {theirs, Codec.Unmarshal},
			"split→ours": {split(theirs.Materialize(), 16384), Codec.Unmarshal},
		} {
			got := m.ProtoReflect().New().Interface()
			if err := pair.dec(pair.data, got); err != nil {
				t.Fatalf("message %d %s: %v", i, name, err)
			}
			if !protobuf.Equal(got, m) {
				t.Errorf("message %d %s: decoded message differs", i, name)
			}
		}
		for _, in := range []mem.BufferSlice{ours, split(theirs.Materialize(), 16384)} {
			p := &Pooled{Msg: m.ProtoReflect().New().Interface(), Buf: []byte{1}}
			if err := Codec.Unmarshal(in, p); err != nil {
				t.Fatalf("message %d pooled: %v", i, err)
			}
			if !protobuf.Equal(p.Msg, m) {
				t.Errorf("message %d pooled: decoded message differs", i)
			}
			if (p.Buf != nil) != (in.Len() >= Large) || (p.Buf != nil && len(p.Buf) != in.Len()) {
				t.Errorf("message %d pooled: %d bytes gathered for a %d-byte message", i, len(p.Buf), in.Len())
			}
			if p.Buf != nil && cap(p.Buf)&(cap(p.Buf)-1) != 0 {
				t.Errorf("message %d pooled: a buffer of %d bytes is not the pool's", i, cap(p.Buf))
			}
		}
		for _, in := range []mem.BufferSlice{ours, split(theirs.Materialize(), 16384), split(theirs.Materialize(), 7)} {
			got, err := viaFrame(in, m.ProtoReflect().New().Interface())
			if err != nil {
				t.Fatalf("message %d frame: %v", i, err)
			}
			if !protobuf.Equal(got, m) {
				t.Errorf("message %d frame: decoded message differs", i)
			}
		}
	}
}

// viaFrame decodes data through a Frame, setting the large fields from
// their pieces.
func viaFrame(data mem.BufferSlice, m protobuf.Message) (protobuf.Message, error) {
	var f Frame
	if err := Codec.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	defer f.Free()
	err := f.Decode(m, func(in protoreflect.Message, fd protoreflect.FieldDescriptor, pieces [][]byte) {
		in.Set(fd, protoreflect.ValueOfBytes(bytes.Join(pieces, nil)))
	})
	return m, err
}

// split cuts b into buffers of n bytes, as HTTP/2 frames arrive.
func split(b []byte, n int) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > n {
		out = append(out, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return append(out, mem.SliceBuffer(b))
}

// TestReferences checks the point of the codec: a large value is sent by
// reference and received without a second copy.
func TestReferences(t *testing.T) {
	data := bytes.Repeat([]byte{7}, 1<<20)
	m := &gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Block{Block: &gatewayv1.Block{Shape: []uint64{1 << 20}, Data: data}}}
	copied, err := Codec.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range copied {
		if d := b.ReadOnlyData(); len(d) == len(data) && &d[0] == &data[0] {
			t.Fatal("a message not marked ByRef was sent by reference")
		}
	}
	out, err := Codec.Marshal(ByRef{Msg: m})
	if err != nil {
		t.Fatal(err)
	}
	referenced := false
	for _, b := range out {
		if d := b.ReadOnlyData(); len(d) == len(data) && &d[0] == &data[0] {
			referenced = true
		}
	}
	if !referenced {
		t.Fatal("the large value was copied into the marshalled message")
	}
	buf := out.Materialize()
	got := &gatewayv1.ReadSlabResponse{}
	if err := decode(buf, got.ProtoReflect(), 0); err != nil {
		t.Fatal(err)
	}
	d := got.GetBlock().GetData()
	if len(d) != len(data) || &d[0] != &buf[len(buf)-len(data)] {
		t.Fatal("the large value was copied out of the received buffer")
	}
}

// TestDone checks that ByRef.Done runs once gRPC has freed every
// referenced value, and at once when nothing was referenced.
func TestDone(t *testing.T) {
	big := bytes.Repeat([]byte{1}, 2*Large)
	m := &codecv1.EncodeResponse{Encoded: [][]byte{big, big[:10], big[Large:]}}
	calls := 0
	out, err := Codec.Marshal(ByRef{Msg: m, Done: func() { calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	var rest mem.BufferSlice
	for _, b := range out {
		// gRPC's writer takes pieces of buffers (each a reference) and
		// frees each.
		rest = append(rest, b.Slice(0, b.Len()/2))
	}
	out.Free()
	if calls != 0 {
		t.Fatalf("Done ran while pieces were still held")
	}
	rest.Free()
	if calls != 1 {
		t.Fatalf("Done ran %d times, want 1", calls)
	}
	small := &codecv1.EncodeResponse{Encoded: [][]byte{big[:10]}}
	if _, err := Codec.Marshal(ByRef{Msg: small, Done: func() { calls++ }}); err != nil || calls != 2 {
		t.Fatalf("Done for a message without large values: %d calls, %v", calls, err)
	}
}

// TestMalformed checks that truncated and corrupt input fails cleanly.
func TestMalformed(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m := &gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Block{Block: &gatewayv1.Block{Shape: []uint64{1}, Data: randBytes(r, 100000)}}}
	b, err := protobuf.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{1, 2, 3, 5, 50, 99999} {
		if err := Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b[:len(b)-cut])}, &gatewayv1.ReadSlabResponse{}); err == nil {
			t.Errorf("cut %d bytes: no error", cut)
		}
	}
	for _, cut := range []int{1, 2, 3, 5, 50, 99999} {
		if _, err := viaFrame(split(b[:len(b)-cut], 1000), &gatewayv1.ReadSlabResponse{}); err == nil {
			t.Errorf("frame, cut %d bytes: no error", cut)
		}
	}
	bad := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, b...)
	if err := Codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bad)}, &gatewayv1.ReadSlabResponse{}); err == nil {
		t.Error("a bad tag: no error")
	}
}

func FuzzDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, m := range messages(r)[:6] {
		b, _ := protobuf.Marshal(m)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ours := &gatewayv1.WriteSlabRequest{}
		errOurs := decode(b, ours.ProtoReflect(), 0)
		theirs := &gatewayv1.WriteSlabRequest{}
		errTheirs := protobuf.Unmarshal(b, theirs)
		if (errOurs == nil) != (errTheirs == nil) {
			t.Fatalf("ours: %v, protobuf: %v", errOurs, errTheirs)
		}
		if errOurs == nil && !protobuf.Equal(ours, theirs) {
			t.Fatal("decoded messages differ")
		}
		framed, errFrame := viaFrame(split(b, 5), &gatewayv1.WriteSlabRequest{})
		if (errFrame == nil) != (errTheirs == nil) {
			t.Fatalf("frame: %v, protobuf: %v", errFrame, errTheirs)
		}
		if errFrame == nil && !protobuf.Equal(framed, theirs) {
			t.Fatal("frame-decoded message differs")
		}
	})
}

func BenchmarkMarshal1MiB(b *testing.B) {
	m := &gatewayv1.ReadSlabResponse{Message: &gatewayv1.ReadSlabResponse_Block{Block: &gatewayv1.Block{Origin: []uint64{0, 0}, Shape: []uint64{512, 512}, Data: make([]byte, 1<<20)}}}
	for _, c := range []struct {
		name  string
		codec interface {
			Marshal(any) (mem.BufferSlice, error)
			Unmarshal(mem.BufferSlice, any) error
		}
	}{{"stock", stock}, {"wire", Codec}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(1 << 20)
			for b.Loop() {
				var v any = m
				if c.name == "wire" {
					v = ByRef{Msg: m}
				}
				out, err := c.codec.Marshal(v)
				if err != nil {
					b.Fatal(err)
				}
				in := split(out.Materialize(), 16384)
				out.Free()
				if err := c.codec.Unmarshal(in, &gatewayv1.ReadSlabResponse{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
