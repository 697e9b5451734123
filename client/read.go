package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/shm"
	"github.com/zarrgate/zarrgate/internal/wire"
)

// Format is how a node is stored.
type Format = gatewayv1.Format

// Formats for CreateArray and CreateGroup.
const (
	FormatV3     = gatewayv1.Format_FORMAT_ZARR_V3
	FormatV2     = gatewayv1.Format_FORMAT_ZARR_V2
	FormatNCZarr = gatewayv1.Format_FORMAT_NCZARR
)

// Node is a group or an array as the gateway describes it.
type Node struct {
	Path       string
	IsArray    bool
	Format     Format
	Attributes json.RawMessage
	// Array metadata (arrays only).
	Shape          []int64
	DataType       string
	ChunkShape     []int64
	ShardShape     []int64 // nil when not sharded
	Codecs         json.RawMessage
	DimensionNames []string
	FillValue      json.RawMessage
	// Dimensions declared by a group (NCZarr).
	Dimensions []Dimension
}

// Dimension is a named NCZarr dimension.
type Dimension struct {
	Name      string
	Size      int64
	Unlimited bool
}

func nodeFromProto(p *gatewayv1.Node) *Node {
	n := &Node{Path: p.GetPath(), Format: p.GetFormat(), Attributes: json.RawMessage(p.GetAttributesJson()),
		IsArray: p.GetKind() == gatewayv1.NodeKind_NODE_KIND_ARRAY}
	if a := p.GetArray(); a != nil {
		n.Shape, n.DataType, n.ChunkShape = i64s(a.GetShape()), a.GetDataType(), i64s(a.GetChunkShape())
		if len(a.GetShardShape()) > 0 {
			n.ShardShape = i64s(a.GetShardShape())
		}
		n.Codecs, n.DimensionNames, n.FillValue = json.RawMessage(a.GetCodecsJson()), a.GetDimensionNames(), json.RawMessage(a.GetFillValueJson())
	}
	for _, d := range p.GetDimensions() {
		n.Dimensions = append(n.Dimensions, Dimension{Name: d.GetName(), Size: int64(d.GetSize()), Unlimited: d.GetUnlimited()})
	}
	return n
}

func i64s(v []uint64) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = int64(x)
	}
	return out
}

func u64s(v []int64) []uint64 {
	out := make([]uint64, len(v))
	for i, x := range v {
		out[i] = uint64(x)
	}
	return out
}

// Array is an array on the gateway.
type Array struct {
	c *Client
	*Node
}

// Group is a group on the gateway.
type Group struct {
	c *Client
	*Node
}

// GetNode returns the node at path ("" is the root).
func (c *Client) GetNode(ctx context.Context, path string) (*Node, error) {
	resp, err := c.arrays.GetNode(ctx, &gatewayv1.GetNodeRequest{Path: path})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	return nodeFromProto(resp.GetNode()), nil
}

// OpenArray opens the array at path.
func (c *Client) OpenArray(ctx context.Context, path string) (*Array, error) {
	n, err := c.GetNode(ctx, path)
	if err != nil {
		return nil, err
	}
	if !n.IsArray {
		return nil, errs.New(errs.FailedPrecondition, "%q is a group, not an array", path)
	}
	return &Array{c: c, Node: n}, nil
}

// OpenGroup opens the group at path.
func (c *Client) OpenGroup(ctx context.Context, path string) (*Group, error) {
	n, err := c.GetNode(ctx, path)
	if err != nil {
		return nil, err
	}
	if n.IsArray {
		return nil, errs.New(errs.FailedPrecondition, "%q is an array, not a group", path)
	}
	return &Group{c: c, Node: n}, nil
}

// List returns the children of the group at path, or all its descendants.
func (c *Client) List(ctx context.Context, path string, recursive bool) ([]*Node, error) {
	stream, err := c.arrays.ListChildren(ctx, &gatewayv1.ListChildrenRequest{Path: path, Recursive: recursive})
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	var out []*Node
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, errs.FromStatus(err)
		}
		for _, n := range resp.GetNodes() {
			out = append(out, nodeFromProto(n))
		}
	}
}

// ArraySpec describes a new array; see the gateway's CreateArrayRequest.
type ArraySpec struct {
	Format         Format
	Shape          []int64
	DataType       string
	ChunkShape     []int64
	ShardShape     []int64
	Codecs         string // v3 codecs JSON; "" = bytes + zstd
	FillValue      string // v3 fill value JSON; "" = zero
	DimensionNames []string
	Attributes     string // JSON object
}

// CreateArray creates an array, and the groups missing above it (the root
// included) in its format, as zarr-python does; an array above it is
// FailedPrecondition.
func (c *Client) CreateArray(ctx context.Context, path string, s ArraySpec) (*Array, error) {
	resp, err := c.arrays.CreateArray(ctx, &gatewayv1.CreateArrayRequest{
		Path: path, Format: s.Format, Shape: u64s(s.Shape), DataType: s.DataType, ChunkShape: u64s(s.ChunkShape),
		ShardShape: u64s(s.ShardShape), CodecsJson: s.Codecs, FillValueJson: s.FillValue,
		DimensionNames: s.DimensionNames, AttributesJson: s.Attributes,
	}, noRetry)
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	return &Array{c: c, Node: nodeFromProto(resp.GetNode())}, nil
}

// GroupOption adds to what CreateGroup asks for.
type GroupOption func(*gatewayv1.CreateGroupRequest)

// WithDimensions declares NCZarr dimensions (netCDF shared dimensions) in
// the new group, for the arrays in it and below to name.
func WithDimensions(dims ...Dimension) GroupOption {
	return func(r *gatewayv1.CreateGroupRequest) {
		for _, d := range dims {
			r.Dimensions = append(r.Dimensions, &gatewayv1.Dimension{Name: d.Name, Size: uint64(d.Size), Unlimited: d.Unlimited})
		}
	}
}

// WithNCZarrLegacy writes an NCZarr group in netCDF-C 4.9.0's form (the
// upper-case _NCZARR_* keys), the only one 4.9.0 reads; netCDF-C 4.10
// reads only the default lower-case form. Groups and arrays created inside
// follow the form of their enclosing group by themselves.
func WithNCZarrLegacy() GroupOption {
	return func(r *gatewayv1.CreateGroupRequest) { r.NczarrLegacy = true }
}

// CreateGroup creates a group with optional attributes (a JSON object), and
// the groups missing above it as CreateArray does.
func (c *Client) CreateGroup(ctx context.Context, path string, format Format, attributes string, opts ...GroupOption) (*Group, error) {
	req := &gatewayv1.CreateGroupRequest{Path: path, Format: format, AttributesJson: attributes}
	for _, o := range opts {
		o(req)
	}
	resp, err := c.arrays.CreateGroup(ctx, req, noRetry)
	if err != nil {
		return nil, errs.FromStatus(err)
	}
	return &Group{c: c, Node: nodeFromProto(resp.GetNode())}, nil
}

// Delete deletes the node at path and everything below it.
func (c *Client) Delete(ctx context.Context, path string) error {
	_, err := c.arrays.DeleteNode(ctx, &gatewayv1.DeleteNodeRequest{Path: path})
	return errs.FromStatus(err)
}

// Slice selects Start, Start+Step, ... below Stop along one dimension.
type Slice struct{ Start, Stop, Step int64 }

// Selection is one Slice per dimension; nil selects the whole array.
type Selection []Slice

func (sel Selection) proto() []*gatewayv1.Slice {
	out := make([]*gatewayv1.Slice, len(sel))
	for i, s := range sel {
		out[i] = &gatewayv1.Slice{Start: uint64(s.Start), Stop: uint64(s.Stop), Step: uint64(s.Step)}
	}
	return out
}

// Shape is the shape of the selection's output on an array of shape.
func (sel Selection) Shape(shape []int64) []int64 {
	if sel == nil {
		return append([]int64(nil), shape...)
	}
	out := make([]int64, len(sel))
	for d, s := range sel {
		step := max(s.Step, 1)
		if s.Stop > s.Start {
			out[d] = (s.Stop - s.Start + step - 1) / step
		}
	}
	return out
}

// Block is a box of a slab: origin and shape in slab coordinates, elements
// in C order, little-endian (variable-length types: data + n+1 offsets).
type Block struct {
	Origin, Shape []int64
	Data          []byte
	Offsets       []int64

	pieces [][]byte // Data, left in receive buffers (recvPieces)
	// done, set on blocks received as pieces (recvPieces: of gRPC's
	// receive buffers or of a shared-memory segment), keeps pieces valid
	// after the next block is yielded, until it is called, once, by
	// whoever copies them out.
	done func()
}

// SlabHeader describes a slab being read.
type SlabHeader struct {
	Shape       []int64
	DataType    string
	ElementSize int
}

// Blocks streams the slab sel (nil: all) of the array block by block, for
// slabs larger than memory: it returns the slab's header, then yields
// blocks as they arrive, in no particular order; together they tile the
// slab. Stopping the iteration early cancels the read.
func (a *Array) Blocks(ctx context.Context, sel Selection) (*SlabHeader, iter.Seq2[Block, error], error) {
	return a.blocks(ctx, sel, recvOwned)
}

// How blocks receives: each block's data owned by the caller; or valid
// only until the next block is yielded, in one reused buffer, for callers
// that copy it out at once; or (fixed-size types) left in gRPC's receive
// buffers or a shared-memory segment as Block.pieces, saving a copy, valid
// until the block's done is called.
const (
	recvOwned = iota
	recvReuse
	recvPieces
)

// slabMsg is what ReadSlab and ReadSlabShared stream.
type slabMsg interface {
	proto.Message
	GetHeader() *gatewayv1.SlabHeader
	GetBlock() *gatewayv1.Block
}

// sharedMinElements is the smallest slab read through shared memory: for
// smaller ones, setting up a segment costs more than it saves.
const sharedMinElements = 1 << 18

func (a *Array) blocks(ctx context.Context, sel Selection, mode int) (*SlabHeader, iter.Seq2[Block, error], error) {
	shared := mode != recvReuse && a.c.shared.Load() && product(sel.Shape(a.Shape)) >= sharedMinElements
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	var stream grpc.ClientStream
	var newMsg func() slabMsg
	var err error
	if shared {
		var s grpc.BidiStreamingClient[gatewayv1.ReadSlabSharedRequest, gatewayv1.ReadSlabSharedResponse]
		if s, err = a.c.arrays.ReadSlabShared(ctx); err == nil {
			err = s.Send(&gatewayv1.ReadSlabSharedRequest{Message: &gatewayv1.ReadSlabSharedRequest_Read{Read: &gatewayv1.ReadSlabRequest{Path: a.Path, Selection: sel.proto()}}})
		}
		stream, newMsg = s, func() slabMsg { return &gatewayv1.ReadSlabSharedResponse{} }
	} else {
		stream, err = a.c.arrays.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: a.Path, Selection: sel.proto()})
		newMsg = func() slabMsg { return &gatewayv1.ReadSlabResponse{} }
	}
	if err != nil {
		cancel()
		return nil, nil, errs.FromStatus(err)
	}
	first := newMsg()
	if err := stream.RecvMsg(first); err != nil {
		cancel()
		if shared && status.Code(err) == codes.Unimplemented && strings.Contains(status.Convert(err).Message(), "ReadSlabShared") {
			// A gateway from before ReadSlabShared ("unknown method"), or
			// one that does not implement it.
			a.c.shared.Store(false)
			return a.blocks(parent, sel, mode)
		}
		if err == io.EOF {
			err = errs.New(errs.DataLoss, "read %q: stream ended before the header", a.Path)
		}
		return nil, nil, errs.FromStatus(err)
	}
	h := first.GetHeader()
	if h == nil {
		cancel()
		return nil, nil, errs.New(errs.DataLoss, "read %q: first message is not a header", a.Path)
	}
	hdr := &SlabHeader{Shape: i64s(h.GetShape()), DataType: h.GetDataType(), ElementSize: int(h.GetElementSize())}
	var sh *sharedIn
	if seg := h.GetSharedSegment(); shared && seg != nil {
		// nil if not on the gateway's host, or not its user: blocks come inline
		m, _ := a.c.maps.attach(seg.GetPath(), int64(seg.GetSize()), seg.GetToken())
		s := stream.(grpc.BidiStreamingClient[gatewayv1.ReadSlabSharedRequest, gatewayv1.ReadSlabSharedResponse])
		if err := s.Send(&gatewayv1.ReadSlabSharedRequest{Message: &gatewayv1.ReadSlabSharedRequest_Attach{Attach: &gatewayv1.SharedAttach{Attached: m != nil}}}); err != nil && err != io.EOF {
			cancel()
			a.c.maps.detach(m, false)
			return nil, nil, errs.FromStatus(err)
		}
		if m != nil {
			sh = &sharedIn{m: m, stream: s, batch: (int64(len(m.Data)) - shm.DataOffset) / 8}
		}
	}
	seq := func(yield func(Block, error) bool) {
		defer cancel()
		if sh != nil {
			defer func() {
				sh.wait() // blocks still being copied out read the mapping
				a.c.maps.detach(sh.m, sh.ended)
			}()
		}
		reuse := &wire.Reuse{Msg: newMsg()}
		for {
			msg := newMsg()
			var pieces [][]byte
			var frame *wire.Frame // holding pieces (recvPieces)
			var err error
			switch mode {
			case recvReuse:
				err = stream.RecvMsg(reuse)
				msg = reuse.Msg.(slabMsg)
			case recvPieces:
				// A frame per message: its pieces stay valid until the
				// block's done, so that blocks can be copied out in
				// parallel.
				frame = new(wire.Frame)
				if err = stream.RecvMsg(frame); err == nil {
					err = frame.Decode(msg, func(in protoreflect.Message, fd protoreflect.FieldDescriptor, p [][]byte) {
						if fd.Name() == "data" {
							pieces = p
						} else {
							in.Set(fd, protoreflect.ValueOfBytes(bytes.Join(p, nil)))
						}
					})
					if err != nil {
						err = errs.Wrap(errs.DataLoss, err, "read %q", a.Path)
					}
				}
			default:
				err = stream.RecvMsg(msg)
			}
			if err == io.EOF {
				return
			}
			if err != nil {
				yield(Block{}, errs.FromStatus(err))
				return
			}
			pb := msg.GetBlock()
			if pb == nil && frame != nil {
				frame.Free()
			}
			if m, ok := msg.(*gatewayv1.ReadSlabSharedResponse); ok && m.GetEnd() != nil && sh != nil {
				sh.end()
				continue
			}
			if pb == nil {
				yield(Block{}, errs.New(errs.DataLoss, "read %q: a message after the header is not a block", a.Path))
				return
			}
			b := Block{Origin: i64s(pb.GetOrigin()), Shape: i64s(pb.GetShape()), Data: pb.GetData(), pieces: pieces}
			if len(pb.GetOffsets()) > 0 {
				b.Offsets = i64s(pb.GetOffsets())
			}
			if frame != nil {
				if pieces != nil {
					b.done = sync.OnceFunc(frame.Free)
				} else {
					frame.Free() // nothing of the block is left in it
				}
			}
			if r := pb.GetShared(); r != nil {
				if b.pieces, err = sh.data(r); err != nil {
					yield(Block{}, errs.Wrap(errs.DataLoss, err, "read %q", a.Path))
					return
				}
				b.done = sh.hold(r.GetLength())
				if mode == recvOwned { // the caller keeps Data: copy it out now
					b.Data = bytes.Clone(b.pieces[0])
					b.pieces = nil
					b.done()
					b.done = nil
				}
			}
			if err := checkBlock(hdr, b); err != nil {
				if b.done != nil {
					b.done()
				}
				yield(Block{}, errs.Wrap(errs.DataLoss, err, "read %q", a.Path))
				return
			}
			if !yield(b, nil) {
				return
			}
		}
	}
	return hdr, seq, nil
}

// checkBlock checks that a block lies inside the slab and, for fixed-size
// types, that its data has the block's size.
func checkBlock(hdr *SlabHeader, b Block) error {
	nd := len(hdr.Shape)
	if len(b.Origin) != nd || len(b.Shape) != nd {
		return fmt.Errorf("block rank %d, slab rank %d", len(b.Origin), nd)
	}
	for d := range nd {
		if b.Origin[d] < 0 || b.Shape[d] < 0 || b.Origin[d] > hdr.Shape[d] || b.Shape[d] > hdr.Shape[d]-b.Origin[d] {
			return fmt.Errorf("block at %v shape %v outside the slab %v", b.Origin, b.Shape, hdr.Shape)
		}
	}
	if hdr.ElementSize == 0 {
		return nil
	}
	n := int64(len(b.Data))
	if b.pieces != nil {
		n = 0
		for _, p := range b.pieces {
			n += int64(len(p))
		}
	}
	if want := product(b.Shape) * int64(hdr.ElementSize); n != want {
		return fmt.Errorf("block at %v has %d bytes, want %d", b.Origin, n, want)
	}
	return nil
}

// sharedIn is the client's side of a ReadSlabShared segment. Blocks are
// released in the order they arrived, as soon as they and every block
// before them are copied out and they add up to an eighth of the ring;
// they may be copied out in any order, by several goroutines.
type sharedIn struct {
	m      *mapping
	stream grpc.BidiStreamingClient[gatewayv1.ReadSlabSharedRequest, gatewayv1.ReadSlabSharedResponse]
	batch  int64 // release once this many bytes are done with

	mu       sync.Mutex
	held     uint64           // blocks handed out so far
	oldest   uint64           // the oldest block not done with
	finished map[uint64]int64 // done with, after a block that is not: bytes
	blocks   uint64           // done with in order, not released yet
	bytes    int64
	out      sync.WaitGroup // blocks not done with
	ended    bool           // the gateway's end came and everything is released
}

// data is a shared block's data in the mapping.
func (s *sharedIn) data(r *gatewayv1.SharedRange) ([][]byte, error) {
	if s == nil {
		return nil, errors.New("a block in shared memory, but no segment is attached")
	}
	off, n := r.GetOffset(), r.GetLength()
	if off < shm.DataOffset || off > uint64(len(s.m.Data)) || n > uint64(len(s.m.Data))-off {
		return nil, fmt.Errorf("shared block range [%d, +%d) outside the %d-byte segment", off, n, len(s.m.Data))
	}
	return [][]byte{s.m.Data[off : off+n]}, nil
}

// hold hands out the next block, of n bytes, and returns its done.
func (s *sharedIn) hold(n uint64) func() {
	s.mu.Lock()
	i := s.held
	s.held++
	s.mu.Unlock()
	s.out.Add(1)
	var once sync.Once
	return func() { once.Do(func() { s.finish(i, int64(n)) }) }
}

// finish records block i as done with, and releases what can be.
func (s *sharedIn) finish(i uint64, n int64) {
	defer s.out.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished == nil {
		s.finished = map[uint64]int64{}
	}
	s.finished[i] = n
	for {
		n, ok := s.finished[s.oldest]
		if !ok {
			break
		}
		delete(s.finished, s.oldest)
		s.oldest++
		s.blocks++
		s.bytes += n
	}
	if s.bytes >= s.batch {
		s.release()
	}
}

// release sends the release of the blocks done with; s.mu is held (the
// stream takes one sender at a time). A failed send is left for the
// stream's status to report.
func (s *sharedIn) release() {
	if s.blocks == 0 {
		return
	}
	s.stream.Send(&gatewayv1.ReadSlabSharedRequest{Message: &gatewayv1.ReadSlabSharedRequest_Release{Release: &gatewayv1.SharedRelease{Blocks: s.blocks}}})
	s.blocks, s.bytes = 0, 0
}

// wait waits until every block handed out is done with.
func (s *sharedIn) wait() { s.out.Wait() }

// end answers the gateway's end of blocks: once every block is copied
// out, all of them are released, and the mapping can serve a later read if
// the gateway lends this segment again.
func (s *sharedIn) end() {
	s.wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release()
	s.ended = true
}

// mappings keeps up to two mappings of gateway segments whose reads have
// ended: a gateway lends its idle segments to later reads, and a client
// that still has one mapped skips opening and mapping it again.
type mappings struct {
	mu   sync.Mutex
	idle []*mapping
}

// mapping is a mapped segment and what identifies it: path, size, token.
type mapping struct {
	*shm.Mapping
	key string
}

// attach returns an idle mapping of the segment, or maps it.
func (c *mappings) attach(path string, size int64, token []byte) (*mapping, error) {
	key := fmt.Sprintf("%s\x00%d\x00%x", path, size, token)
	c.mu.Lock()
	for i, m := range c.idle {
		if m.key == key {
			c.idle = slices.Delete(c.idle, i, i+1)
			c.mu.Unlock()
			return m, nil
		}
	}
	c.mu.Unlock()
	m, err := shm.Attach(path, size, token)
	if err != nil {
		return nil, err
	}
	return &mapping{Mapping: m, key: key}, nil
}

// detach ends a read's use of m: kept idle if the read ended cleanly (the
// oldest idle mapping makes room), unmapped otherwise.
func (c *mappings) detach(m *mapping, keep bool) {
	if m == nil {
		return
	}
	if !keep {
		m.Close()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.idle) == 2 {
		c.idle[0].Close()
		c.idle = c.idle[1:]
	}
	c.idle = append(c.idle, m)
}

// close unmaps every idle mapping.
func (c *mappings) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.idle {
		m.Close()
	}
	c.idle = nil
}

// WriteStats reports what a write stored.
type WriteStats struct {
	Chunks, Bytes int64
}

// WriteBlocks writes the slab sel from blocks that tile it exactly.
func (a *Array) WriteBlocks(ctx context.Context, sel Selection, blocks iter.Seq2[Block, error]) (WriteStats, error) {
	return a.writeBlocks(ctx, sel, blocks, false)
}

// writeBlocks is WriteBlocks; with byRef set, block data is sent without
// a copy, for callers whose data does not change during the call.
func (a *Array) writeBlocks(ctx context.Context, sel Selection, blocks iter.Seq2[Block, error], byRef bool) (WriteStats, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := a.c.arrays.WriteSlab(ctx, noRetry)
	if err != nil {
		return WriteStats{}, errs.FromStatus(err)
	}
	if err := stream.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Header{Header: &gatewayv1.WriteSlabHeader{Path: a.Path, Selection: sel.proto()}}}); err != nil {
		return WriteStats{}, a.closeErr(stream, err)
	}
	for b, err := range blocks {
		if err != nil {
			return WriteStats{}, fmt.Errorf("write %q: %w", a.Path, err)
		}
		pb := &gatewayv1.Block{Origin: u64s(b.Origin), Shape: u64s(b.Shape), Data: b.Data}
		if b.Offsets != nil {
			pb.Offsets = u64s(b.Offsets)
		}
		var msg any = &gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Block{Block: pb}}
		if byRef {
			msg = wire.ByRef{Msg: msg.(*gatewayv1.WriteSlabRequest)}
		}
		if err := stream.SendMsg(msg); err != nil {
			return WriteStats{}, a.closeErr(stream, err)
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return WriteStats{}, errs.FromStatus(err)
	}
	return WriteStats{Chunks: int64(resp.GetChunksWritten()), Bytes: int64(resp.GetBytesWritten())}, nil
}

// closeErr returns the server's status when a send failed because the
// server ended the call.
func (a *Array) closeErr(stream interface {
	CloseAndRecv() (*gatewayv1.WriteSlabResponse, error)
}, err error) error {
	if errors.Is(err, io.EOF) {
		_, err = stream.CloseAndRecv()
	}
	return errs.FromStatus(err)
}
