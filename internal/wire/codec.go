// Package wire is zarrgate's gRPC codec: standard protobuf on the wire,
// byte for byte readable by any protobuf implementation, but without the
// copies the stock codec makes of every large bytes field.
//
// Sending a message wrapped in [ByRef], a bytes field of at least [Large]
// bytes is not copied into the marshalled message: the message is sent as
// a list of buffers, its small fields marshalled as usual and each large
// field's value referenced where it lies. Receiving, the message is
// gathered once into a buffer of its own and large bytes fields alias that
// buffer instead of being copied out of it again; received values are
// owned by the receiver. [Reuse] saves the allocation, and [Frame] the
// gathering copy too, for receivers that copy the values out at once.
//
// Large fields are put after the small fields of their message. Protobuf
// allows fields in any order and every parser accepts it; a message sent
// through this codec decodes to the same message with any codec.
package wire

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	protobuf "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/zarrgate/zarrgate/internal/bufpool"
)

// Large is the size from which a bytes field travels by reference.
const Large = 32 << 10

// maxDepth bounds the nesting the receiving side follows by hand.
const maxDepth = 64

// Codec is the codec; install it with grpc.ForceServerCodecV2 and
// grpc.ForceCodecV2.
var Codec encoding.CodecV2 = codec{}

type codec struct{}

// Name is "proto": the content type on the wire stays application/grpc+proto.
func (codec) Name() string { return proto.Name }

// stock is gRPC's own protobuf codec, used for messages without large
// fields.
var stock = encoding.GetCodecV2(proto.Name)

// ByRef asks for a message to be sent with its large bytes fields by
// reference: stream.SendMsg(wire.ByRef{Msg: m}). The sender must not
// modify those values afterwards, not even once SendMsg returns (gRPC may
// still be writing them out): use it for freshly allocated or immutable
// values only. Other messages are marshalled by copying, as usual.
type ByRef struct {
	Msg protobuf.Message
	// Done, if set, is called once gRPC no longer needs the values sent by
	// reference (at once if there were none), so that their buffers can be
	// recycled. It is not called if the message is never written out (a
	// failed stream): the buffers are then left to the garbage collector.
	Done func()
}

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	br, ok := v.(ByRef)
	if !ok {
		return stock.Marshal(v)
	}
	r := br.Msg.ProtoReflect()
	if !hasLarge(r, 0) {
		out, err := stock.Marshal(br.Msg)
		if err == nil && br.Done != nil {
			br.Done()
		}
		return out, err
	}
	var e encoder
	if err := e.message(r, 0); err != nil {
		return nil, err
	}
	if br.Done != nil {
		// Each referenced value becomes a counted gRPC buffer whose last
		// Free calls back; Done runs when all have.
		var refs []int
		for i, b := range e.out {
			if _, ok := b.(byRef); ok {
				refs = append(refs, i)
			}
		}
		left := countdown{bufpool.NewRefs(len(refs), br.Done)}
		for _, i := range refs {
			data := []byte(e.out[i].(byRef).SliceBuffer)
			e.out[i] = mem.NewBuffer(&data, left)
		}
	}
	for i, b := range e.out {
		if r, ok := b.(byRef); ok {
			e.out[i] = r.SliceBuffer
		}
	}
	return e.out, nil
}

// byRef marks the encoder's referenced values until Marshal wraps them.
type byRef struct{ mem.SliceBuffer }

// countdown is the mem.BufferPool of referenced values: gRPC "returns"
// each when done with it, and the last return calls Done.
type countdown struct{ *bufpool.Refs }

func (countdown) Get(int) *[]byte { panic("wire: countdown is not a pool") }

func (c countdown) Put(*[]byte) { c.Release() }

// Reuse receives Msg into Buf's memory: RecvMsg(&Reuse{Msg: m, Buf: buf})
// gathers the message into Buf (grown if too small) and leaves m's large
// bytes fields aliasing it. Pass the same Reuse again for the next message
// once done with m's values: no allocation, and the buffer stays warm in
// the CPU's caches.
type Reuse struct {
	Msg protobuf.Message
	Buf []byte
}

// Pooled receives Msg as a plain RecvMsg(m) would, except that a message
// of at least [Large] bytes is gathered into a buffer from
// internal/bufpool, left in Buf, instead of a fresh allocation: Msg's
// large bytes fields alias Buf, and the receiver hands Buf back
// (bufpool.Put) once nothing uses them, or drops it. Buf is nil after a
// smaller message, whose values are copies as usual.
type Pooled struct {
	Msg protobuf.Message
	Buf []byte
}

// Lenient receives Msg (a message, *Reuse, *Pooled or *Frame) as RecvMsg(Msg)
// would, except that a message that does not parse (bad wire data, a
// string field that is not UTF-8) leaves its error in Err and the receive
// succeeds. gRPC reports a failed receive to the client at once, as
// Internal; a server that receives through Lenient can answer
// InvalidArgument instead (internal/rpc does, for every call).
type Lenient struct {
	Msg any
	Err error
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if l, ok := v.(*Lenient); ok {
		l.Err = c.Unmarshal(data, l.Msg)
		return nil
	}
	if f, ok := v.(*Frame); ok {
		f.Free()
		data.Ref()
		f.data = data
		return nil
	}
	if p, ok := v.(*Pooled); ok {
		p.Buf = nil
		n := data.Len()
		if n < Large {
			return stock.Unmarshal(data, p.Msg)
		}
		p.Buf = bufpool.Get(n)
		data.CopyTo(p.Buf)
		protobuf.Reset(p.Msg)
		return decode(p.Buf, p.Msg.ProtoReflect(), 0)
	}
	if r, ok := v.(*Reuse); ok {
		n := data.Len()
		if cap(r.Buf) < n {
			r.Buf = make([]byte, n)
		}
		r.Buf = r.Buf[:n]
		data.CopyTo(r.Buf)
		protobuf.Reset(r.Msg)
		return decode(r.Buf, r.Msg.ProtoReflect(), 0)
	}
	m, ok := v.(protobuf.Message)
	if !ok || data.Len() < Large {
		return stock.Unmarshal(data, v)
	}
	buf := data.Materialize() // the one copy; large fields alias it
	return decode(buf, m.ProtoReflect(), 0)
}

// hasLarge reports whether m holds a large bytes value in any field,
// nested messages included.
func hasLarge(m protoreflect.Message, depth int) bool {
	if depth > maxDepth {
		return false
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.IsMap() {
			return true
		}
		each(fd, v, func(v protoreflect.Value) {
			switch fd.Kind() {
			case protoreflect.BytesKind:
				found = found || len(v.Bytes()) >= Large
			case protoreflect.MessageKind:
				found = found || hasLarge(v.Message(), depth+1)
			}
		})
		return !found
	})
	return found
}

// each calls fn with v, or with every element of v if fd is a list.
func each(fd protoreflect.FieldDescriptor, v protoreflect.Value, fn func(protoreflect.Value)) {
	if !fd.IsList() {
		fn(v)
		return
	}
	l := v.List()
	for i := range l.Len() {
		fn(l.Get(i))
	}
}

// encoder builds a message as a list of buffers: small marshalled pieces
// and large values by reference.
type encoder struct {
	out mem.BufferSlice
}

func (e *encoder) add(b []byte) {
	if len(b) > 0 {
		e.out = append(e.out, mem.SliceBuffer(b))
	}
}

// message appends m's encoding: its small fields marshalled together by
// the protobuf library, then each field holding a large value, in field
// order, with large bytes by reference and messages encoded recursively.
func (e *encoder) message(m protoreflect.Message, depth int) error {
	if depth > maxDepth {
		return errors.New("wire: message nested too deeply")
	}
	small := m.New()
	var large []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		big := false
		if !fd.IsMap() && (fd.Kind() == protoreflect.BytesKind || fd.Kind() == protoreflect.MessageKind) {
			each(fd, v, func(v protoreflect.Value) {
				if fd.Kind() == protoreflect.BytesKind {
					big = big || len(v.Bytes()) >= Large
				} else {
					big = big || hasLarge(v.Message(), depth+1)
				}
			})
		}
		if big {
			large = append(large, fd)
		} else {
			small.Set(fd, v)
		}
		return true
	})
	b, err := protobuf.MarshalOptions{}.Marshal(small.Interface())
	if err != nil {
		return err
	}
	e.add(b)
	for _, fd := range large {
		var err error
		each(fd, m.Get(fd), func(v protoreflect.Value) {
			if err != nil {
				return
			}
			tag := protowire.AppendTag(nil, fd.Number(), protowire.BytesType)
			if fd.Kind() == protoreflect.BytesKind {
				data := v.Bytes()
				e.add(protowire.AppendVarint(tag, uint64(len(data))))
				if len(data) >= Large {
					e.out = append(e.out, byRef{mem.SliceBuffer(data)})
				} else {
					e.add(append([]byte(nil), data...))
				}
				return
			}
			var sub encoder
			if err = sub.message(v.Message(), depth+1); err != nil {
				return
			}
			e.add(protowire.AppendVarint(tag, uint64(sub.out.Len())))
			e.out = append(e.out, sub.out...)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// decode parses b into m: large bytes fields alias b, large
// length-delimited message fields are parsed recursively, everything else
// goes through the protobuf library, in wire order, so that repeated fields
// keep their order and unknown fields are kept.
func decode(b []byte, m protoreflect.Message, depth int) error {
	return decodePieces(&cursor{p: [][]byte{b}, n: len(b)}, m, nil, depth)
}

// Frame receives a message as it arrived, without gathering it:
// RecvMsg(&f) keeps the message's bytes in gRPC's receive buffers, and
// [Frame.Decode] parses them leaving large bytes fields where they lie.
// Free returns the buffers; nothing decoded from the frame may be used
// after that.
type Frame struct {
	data mem.BufferSlice
}

// Free releases the frame's buffers.
func (f *Frame) Free() {
	f.data.Free()
	f.data = nil
}

// Len is the frame's size in bytes.
func (f *Frame) Len() int { return f.data.Len() }

// Decode parses the frame into m, except that each large singular bytes
// field (at any depth) is handed to large with the message holding it
// instead of being set: its value as the pieces of received buffers it
// spans, in order, valid until Free. Large repeated bytes values are set,
// aliasing the frame when they lie in one buffer.
func (f *Frame) Decode(m protobuf.Message, large func(in protoreflect.Message, fd protoreflect.FieldDescriptor, pieces [][]byte)) error {
	c := &cursor{}
	for _, b := range f.data {
		if d := b.ReadOnlyData(); len(d) > 0 {
			c.p = append(c.p, d)
			c.n += len(d)
		}
	}
	protobuf.Reset(m)
	return decodePieces(c, m.ProtoReflect(), large, 0)
}

// setLarge stores the large length-delimited value of field fd, given as
// the pieces of received buffers it spans: a singular bytes field goes to
// large if set; other bytes values alias their buffer (when in one piece);
// messages are parsed recursively, a singular one merging with what came
// before, as protobuf requires.
func setLarge(m protoreflect.Message, fd protoreflect.FieldDescriptor, pieces [][]byte, large func(protoreflect.Message, protoreflect.FieldDescriptor, [][]byte), depth int) error {
	n := 0
	for _, p := range pieces {
		n += len(p)
	}
	switch {
	case fd.Kind() == protoreflect.BytesKind && !fd.IsList() && large != nil:
		large(m, fd, pieces)
	case fd.Kind() == protoreflect.BytesKind:
		v := protoreflect.ValueOfBytes(joined(pieces))
		if fd.IsList() {
			m.Mutable(fd).List().Append(v)
		} else {
			m.Set(fd, v)
		}
	case fd.IsList():
		l := m.Mutable(fd).List()
		e := l.NewElement()
		if err := decodePieces(&cursor{p: pieces, n: n}, e.Message(), large, depth+1); err != nil {
			return err
		}
		l.Append(e)
	default:
		// A oneof member of another type is replaced.
		if od := fd.ContainingOneof(); od != nil {
			if w := m.WhichOneof(od); w != nil && w.Number() != fd.Number() {
				m.Clear(w)
			}
		}
		return decodePieces(&cursor{p: pieces, n: n}, m.Mutable(fd).Message(), large, depth+1)
	}
	return nil
}

// joined is pieces as one slice: the piece itself if there is one.
func joined(pieces [][]byte) []byte {
	if len(pieces) == 1 {
		return pieces[0]
	}
	var out []byte
	for _, p := range pieces {
		out = append(out, p...)
	}
	return out
}

// cursor reads a message spread over several buffers.
type cursor struct {
	p [][]byte
	n int // bytes left
}

func (c *cursor) byte() (byte, error) {
	if c.n == 0 {
		return 0, errors.New("wire: message truncated")
	}
	b := c.p[0][0]
	c.skip(1)
	return b, nil
}

// varint reads a varint, appending its bytes to *raw.
func (c *cursor) varint(raw *[]byte) (uint64, error) {
	var v uint64
	for i := 0; i < 10; i++ {
		b, err := c.byte()
		if err != nil {
			return 0, err
		}
		*raw = append(*raw, b)
		v |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return v, nil
		}
	}
	return 0, errors.New("wire: varint overflows 64 bits")
}

func (c *cursor) skip(n int) {
	c.n -= n
	for n > 0 {
		k := min(n, len(c.p[0]))
		c.p[0] = c.p[0][k:]
		n -= k
		if len(c.p[0]) == 0 {
			c.p = c.p[1:]
		}
	}
}

// take splits off the next n bytes as pieces of the buffers, uncopied.
func (c *cursor) take(n int) ([][]byte, error) {
	if n > c.n || n < 0 {
		return nil, errors.New("wire: message truncated")
	}
	var out [][]byte
	for left := n; left > 0; {
		k := min(left, len(c.p[0]))
		out = append(out, c.p[0][:k])
		left -= k
		c.skip(k)
	}
	return out, nil
}

// appendTo appends the next n bytes to b.
func (c *cursor) appendTo(b []byte, n int) ([]byte, error) {
	pieces, err := c.take(n)
	for _, p := range pieces {
		b = append(b, p...)
	}
	return b, err
}

func decodePieces(c *cursor, m protoreflect.Message, large func(protoreflect.Message, protoreflect.FieldDescriptor, [][]byte), depth int) error {
	if depth > maxDepth {
		return errors.New("wire: message nested too deeply")
	}
	fields := m.Descriptor().Fields()
	var pending []byte
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		err := protobuf.UnmarshalOptions{Merge: true}.Unmarshal(pending, m.Interface())
		pending = pending[:0]
		return err
	}
	for c.n > 0 {
		// Tags and lengths are copied as they came (pending keeps unknown
		// fields byte for byte), then dropped again for large fields.
		start := len(pending)
		tag, err := c.varint(&pending)
		if err != nil {
			return err
		}
		num, typ := protowire.DecodeTag(tag)
		if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
			return fmt.Errorf("wire: invalid field number %d", num)
		}
		switch typ {
		case protowire.VarintType:
			if _, err := c.varint(&pending); err != nil {
				return err
			}
		case protowire.Fixed32Type, protowire.Fixed64Type:
			n := 4
			if typ == protowire.Fixed64Type {
				n = 8
			}
			if pending, err = c.appendTo(pending, n); err != nil {
				return err
			}
		case protowire.BytesType:
			v, err := c.varint(&pending)
			if err != nil {
				return err
			}
			if v > uint64(c.n) {
				return errors.New("wire: message truncated")
			}
			n := int(v)
			fd := fields.ByNumber(num)
			if n >= Large && fd != nil && !fd.IsMap() &&
				(fd.Kind() == protoreflect.BytesKind || fd.Kind() == protoreflect.MessageKind) {
				pending = pending[:start]
				if err := flush(); err != nil {
					return err
				}
				pieces, _ := c.take(n)
				if err := setLarge(m, fd, pieces, large, depth); err != nil {
					return err
				}
				continue
			}
			if pending, err = c.appendTo(pending, n); err != nil {
				return err
			}
		case protowire.StartGroupType:
			// Groups (unknown fields only, here) are rare: find the end in
			// a contiguous copy of the rest.
			rest, _ := c.appendTo(nil, c.n)
			n := protowire.ConsumeFieldValue(num, typ, rest)
			if n < 0 {
				return fmt.Errorf("wire: field %d: %w", num, protowire.ParseError(n))
			}
			pending = append(pending, rest[:n]...)
			c.p, c.n = [][]byte{rest[n:]}, len(rest)-n
		default:
			return fmt.Errorf("wire: field %d: unexpected wire type %d", num, typ)
		}
	}
	return flush()
}

// Decode parses b, a message's bytes, into m as the codec receives one:
// large bytes fields alias b, which must then stay unchanged while m's
// values are used. For messages that come other ways than gRPC (the frames
// of a bulk connection, internal/bulk).
func Decode(b []byte, m protobuf.Message) error {
	protobuf.Reset(m)
	return decode(b, m.ProtoReflect(), 0)
}

// Marshal marshals m as Codec sends wire.ByRef{Msg: m}: its large bytes
// fields by reference, as pieces of the returned buffers, which the caller
// frees once written. For messages sent other ways than gRPC.
func Marshal(m protobuf.Message) (mem.BufferSlice, error) {
	return Codec.Marshal(ByRef{Msg: m})
}
