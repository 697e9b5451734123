// Nodes: groups and arrays, their metadata, and creating, listing and
// deleting them.

package client

import (
	"context"
	"encoding/json"
	"io"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
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
		return nil, grpcerr.FromStatus(err)
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
		return nil, grpcerr.FromStatus(err)
	}
	var out []*Node
	for {
		resp, err := stream.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, grpcerr.FromStatus(err)
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
		return nil, grpcerr.FromStatus(err)
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
		return nil, grpcerr.FromStatus(err)
	}
	return &Group{c: c, Node: nodeFromProto(resp.GetNode())}, nil
}

// Delete deletes the node at path and everything below it.
func (c *Client) Delete(ctx context.Context, path string) error {
	_, err := c.arrays.DeleteNode(ctx, &gatewayv1.DeleteNodeRequest{Path: path})
	return grpcerr.FromStatus(err)
}
