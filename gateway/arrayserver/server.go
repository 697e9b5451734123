// Package arrayserver serves a gateway engine (package gateway) as
// zarrgate.gateway.v1.ArrayService, with its store beside as
// zarrgate.store.v1.StoreService. It is the RPC layer: it translates
// between the wire's messages and the engine's plain Go types, turns
// errors into gRPC statuses, and plays ReadSlabShared's protocol over the
// engine's shared-memory placement. The engine itself knows nothing of
// generated stubs or gRPC.
package arrayserver

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc"

	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/bulk"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/storesvc/storeserver"
	"github.com/zarrgate/zarrgate/zarr"
)

// Server serves a Gateway as zarrgate.gateway.v1.ArrayService, and its
// store as zarrgate.store.v1.StoreService (a pass-through, so that stub
// clients and other Zarr libraries can use the raw store through the
// gateway).
type Server struct {
	gatewayv1.UnimplementedArrayServiceServer
	g    *gateway.Gateway
	bulk *bulk.Listener // ReadSlab's bulk connections (SetBulk); nil: none

	small smallServer // OpenSmallReads' connections (smallreads.go)
}

// NewServer returns the gRPC server of g.
func NewServer(g *gateway.Gateway) *Server { return &Server{g: g} }

// Register registers ArrayService and the StoreService pass-through.
// A registrar that can run local calls (internal/rpc's Server) gets
// small-reads connections (OpenSmallReads), closed when it drains.
func (s *Server) Register(r grpc.ServiceRegistrar) {
	gatewayv1.RegisterArrayServiceServer(r, s)
	if lc, ok := r.(LocalCaller); ok {
		s.small.local = lc
	}
	if d, ok := r.(interface{ OnDrain(func()) }); ok {
		d.OnDrain(s.small.drain)
	}
	storeserver.New(s.g.RawStore(), storeserver.WithSegments(func() storeserver.Segment {
		if seg := s.g.SharedSegment(); seg != nil {
			return seg
		}
		return nil // not a typed nil: no segment
	})).Register(r)
}

// formatProto and formatFromProto convert formats. The engine numbers its
// formats as the wire does (TestEnumsMatchTheWire), so a number neither
// knows passes through for the engine to refuse by its number.
func formatProto(f gateway.Format) gatewayv1.Format { return gatewayv1.Format(f) }

func formatFromProto(f gatewayv1.Format) gateway.Format { return gateway.Format(f) }

// kindProto is k's wire form.
func kindProto(k gateway.NodeKind) gatewayv1.NodeKind {
	if k == gateway.KindArray {
		return gatewayv1.NodeKind_NODE_KIND_ARRAY
	}
	return gatewayv1.NodeKind_NODE_KIND_GROUP
}

// NodeProto converts a node for the wire.
func NodeProto(n *gateway.Node) (*gatewayv1.Node, error) {
	out := &gatewayv1.Node{Path: n.Path, Kind: kindProto(n.Kind()), Format: formatProto(n.Format), AttributesJson: "{}"}
	if n.Array != nil {
		info, err := gateway.DescribeArray(n.Array)
		if err != nil {
			return nil, err
		}
		out.Array = arrayInfo(info)
	} else {
		for _, d := range n.Group.Dimensions {
			out.Dimensions = append(out.Dimensions, &gatewayv1.Dimension{Name: d.Name, Size: uint64(d.Size), Unlimited: d.Unlimited})
		}
	}
	if attrs := n.Attributes(); len(attrs) > 0 {
		out.AttributesJson = string(attrs)
	}
	return out, nil
}

// arrayInfo is info's wire form.
func arrayInfo(info gateway.ArrayInfo) *gatewayv1.ArrayInfo {
	out := &gatewayv1.ArrayInfo{
		Shape: u64s(info.Shape), DataType: info.DataType, ChunkShape: u64s(info.ChunkShape),
		CodecsJson: string(info.Codecs), DimensionNames: info.DimensionNames, FillValueJson: string(info.FillValue),
	}
	if info.ShardShape != nil {
		out.ShardShape = u64s(info.ShardShape)
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

func i64s(v []uint64) ([]int64, error) {
	out := make([]int64, len(v))
	for i, x := range v {
		if x > 1<<62 {
			return nil, errs.New(errs.InvalidArgument, "dimension %d: %d is too large", i, x)
		}
		out[i] = int64(x)
	}
	return out, nil
}

func (s *Server) reply(n *gateway.Node, err error) (*gatewayv1.Node, error) {
	if err != nil {
		return nil, grpcerr.ToStatus(err)
	}
	p, err := NodeProto(n)
	return p, grpcerr.ToStatus(err)
}

// GetNode implements gatewayv1.ArrayServiceServer.
func (s *Server) GetNode(ctx context.Context, req *gatewayv1.GetNodeRequest) (*gatewayv1.GetNodeResponse, error) {
	n, err := s.reply(s.g.GetNode(ctx, req.GetPath()))
	if err != nil {
		return nil, err
	}
	return &gatewayv1.GetNodeResponse{Node: n}, nil
}

// ListChildren implements gatewayv1.ArrayServiceServer.
func (s *Server) ListChildren(req *gatewayv1.ListChildrenRequest, stream grpc.ServerStreamingServer[gatewayv1.ListChildrenResponse]) error {
	const batch = 100
	resp := &gatewayv1.ListChildrenResponse{}
	err := s.g.Children(stream.Context(), req.GetPath(), req.GetRecursive(), func(n *gateway.Node) error {
		p, err := NodeProto(n)
		if err != nil {
			return err
		}
		resp.Nodes = append(resp.Nodes, p)
		if len(resp.Nodes) == batch {
			if err := stream.Send(resp); err != nil {
				return err
			}
			resp = &gatewayv1.ListChildrenResponse{}
		}
		return nil
	})
	if err != nil {
		return grpcerr.ToStatus(err)
	}
	if len(resp.Nodes) > 0 {
		return stream.Send(resp)
	}
	return nil
}

// CreateGroup implements gatewayv1.ArrayServiceServer.
func (s *Server) CreateGroup(ctx context.Context, req *gatewayv1.CreateGroupRequest) (*gatewayv1.CreateGroupResponse, error) {
	spec := gateway.GroupSpec{Format: formatFromProto(req.GetFormat()), Attributes: json.RawMessage(req.GetAttributesJson()), NCZarrLegacy: req.GetNczarrLegacy()}
	for _, d := range req.GetDimensions() {
		spec.Dimensions = append(spec.Dimensions, zarr.Dimension{Name: d.GetName(), Size: int64(d.GetSize()), Unlimited: d.GetUnlimited()})
	}
	n, err := s.reply(s.g.CreateGroup(ctx, req.GetPath(), spec))
	if err != nil {
		return nil, err
	}
	return &gatewayv1.CreateGroupResponse{Node: n}, nil
}

// CreateArray implements gatewayv1.ArrayServiceServer.
func (s *Server) CreateArray(ctx context.Context, req *gatewayv1.CreateArrayRequest) (*gatewayv1.CreateArrayResponse, error) {
	spec := gateway.ArraySpec{
		Format: formatFromProto(req.GetFormat()), DataType: req.GetDataType(), DimensionNames: req.GetDimensionNames(),
		Codecs: json.RawMessage(req.GetCodecsJson()), FillValue: json.RawMessage(req.GetFillValueJson()),
		Attributes: json.RawMessage(req.GetAttributesJson()),
	}
	var err error
	if spec.Shape, err = i64s(req.GetShape()); err == nil {
		if spec.ChunkShape, err = i64s(req.GetChunkShape()); err == nil {
			spec.ShardShape, err = i64s(req.GetShardShape())
		}
	}
	if err != nil {
		return nil, grpcerr.ToStatus(err)
	}
	if len(spec.ShardShape) == 0 {
		spec.ShardShape = nil
	}
	n, err := s.reply(s.g.CreateArray(ctx, req.GetPath(), spec))
	if err != nil {
		return nil, err
	}
	return &gatewayv1.CreateArrayResponse{Node: n}, nil
}

// UpdateAttributes implements gatewayv1.ArrayServiceServer.
func (s *Server) UpdateAttributes(ctx context.Context, req *gatewayv1.UpdateAttributesRequest) (*gatewayv1.UpdateAttributesResponse, error) {
	n, err := s.reply(s.g.UpdateAttributes(ctx, req.GetPath(), json.RawMessage(req.GetAttributesJson()), req.GetMerge()))
	if err != nil {
		return nil, err
	}
	return &gatewayv1.UpdateAttributesResponse{Node: n}, nil
}

// DeleteNode implements gatewayv1.ArrayServiceServer.
func (s *Server) DeleteNode(ctx context.Context, req *gatewayv1.DeleteNodeRequest) (*gatewayv1.DeleteNodeResponse, error) {
	if err := s.g.Delete(ctx, req.GetPath()); err != nil {
		return nil, grpcerr.ToStatus(err)
	}
	return &gatewayv1.DeleteNodeResponse{}, nil
}

// ResizeArray implements gatewayv1.ArrayServiceServer.
func (s *Server) ResizeArray(ctx context.Context, req *gatewayv1.ResizeArrayRequest) (*gatewayv1.ResizeArrayResponse, error) {
	shape, err := i64s(req.GetShape())
	if err != nil {
		return nil, grpcerr.ToStatus(err)
	}
	n, err := s.reply(s.g.Resize(ctx, req.GetPath(), shape))
	if err != nil {
		return nil, err
	}
	return &gatewayv1.ResizeArrayResponse{Node: n}, nil
}
