package authzgrpc_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/gateway/arrayserver"
	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"
	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"
	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"
	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/authz"
	"github.com/zarrgate/zarrgate/internal/authz/authzgrpc"
	"github.com/zarrgate/zarrgate/internal/bulk"
	"github.com/zarrgate/zarrgate/internal/rpc"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/storesvc/storeserver"
)

// principalHeader carries the test caller: "name" or "name;group,group".
//
// The principal comes from this header through testAuthn, a stand-in for
// the authentication interceptor of part H2 of issue 15 (mTLS, tokens,
// JWT), which lands separately. What is tested here is authorization:
// what a given principal may do. Once H2's authenticator is merged, the
// e2e tests drive the same policy with real credentials.
const principalHeader = "x-test-principal"

func principalOf(ctx context.Context) (auth.Principal, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(principalHeader)
	if len(v) == 0 {
		return auth.Principal{}, false
	}
	name, groups, _ := strings.Cut(v[0], ";")
	p := auth.Principal{Name: name, Method: "token"}
	if groups != "" {
		p.Groups = strings.Split(groups, ",")
	}
	return p, true
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }

func testAuthn() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if p, ok := principalOf(ctx); ok {
				ctx = auth.WithPrincipal(ctx, p)
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if p, ok := principalOf(ss.Context()); ok {
				return h(srv, ctxStream{ss, auth.WithPrincipal(ss.Context(), p)})
			}
			return h(srv, ss)
		}),
	}
}

const testPolicy = `
rules:
  - principals: [user:alice]
    permissions: [read, write, delete]
    prefixes: [data]
  - principals: [user:bob]            # a sibling prefix only
    permissions: [read, write, delete]
    prefixes: [other/]
  - principals: [group:ops]
    permissions: [admin]
    prefixes: [""]
  - principals: [user:erin]           # one array, nothing of its parent
    permissions: [read]
    prefixes: [data/arr]
  - principals: [user:frank]          # an array's metadata document, not its chunks
    permissions: [read, write]
    prefixes: [data/arr/zarr.json]
  - principals: [user:gina]           # the chunks, not the node
    permissions: [write]
    prefixes: [data/arr/c]
  - principals: [user:hal]            # the root group's document, not the hierarchy
    permissions: [read]
    prefixes: [zarr.json, data/.zmetadata]
  - principals: [user:ivan]           # below proj/, where no group exists yet
    permissions: [read, write]
    prefixes: [proj/team]
`

// syncBuffer is an audit log destination the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// env is a server with the policy in force: ArrayService with the
// gateway's StoreService pass-through and CodecService ("gateway"), or
// StoreService alone ("store"), over a memory store seeded as root.
type env struct {
	store *storesvc.Portable // the store, read directly
	conn  *grpc.ClientConn
	audit *syncBuffer
	calls *methodRecorder // what conn called
}

func newEnv(t *testing.T, kind string) *env {
	t.Helper()
	pol, err := authz.Parse([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	return newEnvPolicy(t, kind, func() *authz.Policy { return pol })
}

// newEnvPolicy is newEnv with the policy in force from policy.
func newEnvPolicy(t *testing.T, kind string, policy func() *authz.Policy) *env {
	t.Helper()
	e := &env{store: storesvc.Wrap(memory.New()), audit: &syncBuffer{}, calls: &methodRecorder{}}
	cfg := authzgrpc.Config{Policy: policy, Audit: authz.NewAuditor(e.audit)}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), append(testAuthn(), authzgrpc.ServerOptions(cfg)...)...)
	register(t, srv, e.store, kind)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	e.conn, err = rpc.Dial(lis.Addr().String(), e.calls.dialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.conn.Close() })
	seed(t, as("root;ops"), e.conn, kind)
	return e
}

// register adds the services of a server kind over store: ArrayService
// (with the gateway's StoreService pass-through) and CodecService for
// "gateway", StoreService alone for "store".
func register(t *testing.T, srv *rpc.Server, store *storesvc.Portable, kind string) {
	switch kind {
	case "gateway":
		g := gateway.New(store, codecsvc.NewLocal(), gateway.Config{})
		as := arrayserver.NewServer(g)
		// A bulk listener, for OpenSmallReads' connections (plain TCP:
		// what is checked is the credentials of the call that opened
		// the connection, not the connection's own).
		bl, err := bulk.Listen("127.0.0.1:0", bulk.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bl.Close() })
		as.SetBulk(bl)
		as.Register(srv)
		codecsvc.NewServer(codecsvc.NewLocal()).Register(srv)
	case "store":
		storeserver.New(store).Register(srv)
	}
}

// services are the services each server kind registers: the matrix must
// call every method of each.
var services = map[string][]grpc.ServiceDesc{
	"store":   {storev1.StoreService_ServiceDesc},
	"gateway": {storev1.StoreService_ServiceDesc, gatewayv1.ArrayService_ServiceDesc, codecv1.CodecService_ServiceDesc},
}

// methodRecorder records the methods a connection calls (client
// interceptors), so the matrix knows which method each case reached.
type methodRecorder struct {
	mu      sync.Mutex
	methods []string
}

func (r *methodRecorder) add(m string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.methods = append(r.methods, m)
}

func (r *methodRecorder) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			r.add(method)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			r.add(method)
			return streamer(ctx, desc, cc, method, opts...)
		}),
	}
}

// take returns the distinct methods called since the last take.
func (r *methodRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Compact(slices.Sorted(slices.Values(r.methods)))
	r.methods = nil
	return out
}

// coverage is, per server kind, the methods the cases of a matrix called.
type coverage map[string]map[string]bool

// add records what case c called: exactly one method.
func (cv coverage) add(t *testing.T, c rpcCase, methods []string) {
	t.Helper()
	if len(methods) != 1 {
		t.Errorf("case %s/%s called %v, want one method", c.kind, c.name, methods)
	}
	if cv[c.kind] == nil {
		cv[c.kind] = map[string]bool{}
	}
	for _, m := range methods {
		cv[c.kind][m] = true
	}
}

// check fails for every method a server kind registers that no case
// called: a method added to a service must get a case in the table
// (storeCases, arrayCases), which both matrices run.
func (cv coverage) check(t *testing.T) {
	t.Helper()
	for kind, descs := range services {
		for _, d := range descs {
			var names []string
			for _, m := range d.Methods {
				names = append(names, m.MethodName)
			}
			for _, s := range d.Streams {
				names = append(names, s.StreamName)
			}
			for _, n := range names {
				if m := "/" + d.ServiceName + "/" + n; !cv[kind][m] {
					t.Errorf("%s on the %s server: no case of the matrix calls it (add one to storeCases or arrayCases)", m, kind)
				}
			}
		}
	}
}

const codecsJSON = `[{"name":"bytes","configuration":{"endian":"little"}}]`

// seed writes data/arr and other/arr (int32 [4], chunks of 2, written),
// the raw keys data/raw, other/raw and dataX/k, through the server over
// conn, as ctx's caller (a member of ops).
func seed(t *testing.T, ctx context.Context, conn *grpc.ClientConn, kind string) {
	t.Helper()
	st := storev1.NewStoreServiceClient(conn)
	for _, k := range []string{"data/raw", "other/raw", "dataX/k"} {
		if err := set(ctx, st, k, "v-"+k); err != nil {
			t.Fatalf("seed %s: %v", k, err)
		}
	}
	if kind != "gateway" {
		return
	}
	ar := gatewayv1.NewArrayServiceClient(conn)
	for _, p := range []string{"data/arr", "other/arr"} {
		if _, err := ar.CreateArray(ctx, &gatewayv1.CreateArrayRequest{Path: p, Shape: []uint64{4}, DataType: "int32", ChunkShape: []uint64{2}, CodecsJson: codecsJSON}); err != nil {
			t.Fatalf("seed %s: %v", p, err)
		}
		if err := writeSlab(ctx, ar, p, 7); err != nil {
			t.Fatalf("seed %s: %v", p, err)
		}
	}
}

func as(who string) context.Context {
	if who == "" {
		return context.Background()
	}
	return metadata.AppendToOutgoingContext(context.Background(), principalHeader, who)
}

func set(ctx context.Context, st storev1.StoreServiceClient, key, val string) error {
	s, err := st.Set(ctx)
	if err != nil {
		return err
	}
	if err := s.Send(&storev1.SetRequest{Header: &storev1.SetHeader{Key: key}, Data: []byte(val)}); err != nil && err != io.EOF {
		return err
	}
	_, err = s.CloseAndRecv()
	return err
}

func writeSlab(ctx context.Context, ar gatewayv1.ArrayServiceClient, path string, v int32) error {
	s, err := ar.WriteSlab(ctx)
	if err != nil {
		return err
	}
	data := make([]byte, 16)
	for i := range 4 {
		binary.LittleEndian.PutUint32(data[4*i:], uint32(v))
	}
	if err := s.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Header{Header: &gatewayv1.WriteSlabHeader{Path: path}}}); err != nil && err != io.EOF {
		return err
	}
	if err := s.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Block{Block: &gatewayv1.Block{Origin: []uint64{0}, Shape: []uint64{4}, Data: data}}}); err != nil && err != io.EOF {
		return err
	}
	_, err = s.CloseAndRecv()
	return err
}

// drain receives a server stream to its end, returning what it received.
func drain[T any](s interface{ Recv() (*T, error) }, err error) ([]*T, error) {
	if err != nil {
		return nil, err
	}
	var out []*T
	for {
		m, err := s.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
}

// snapshot is every key of the store with its value.
func (e *env) snapshot(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, err := range e.store.ListPrefix(context.Background(), "") {
		if err != nil {
			t.Fatal(err)
		}
		o, err := e.store.Get(context.Background(), k, storesvc.ByteRange{})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(o)
		o.Close()
		out[k] = string(b)
	}
	return out
}

type rpcCase struct {
	name string
	kind string // "gateway" or "store": which server; StoreService cases run on both
	call func(ctx context.Context, c *grpc.ClientConn) error
	// want per principal: "" anonymous, carol (no rule), bob (sibling
	// prefix), alice (permission on data).
	want map[string]codes.Code
}

const (
	anon  = ""
	carol = "carol"
	bob   = "bob"
	alice = "alice"
)

var denyAll = map[string]codes.Code{anon: codes.PermissionDenied, carol: codes.PermissionDenied, bob: codes.PermissionDenied, alice: codes.OK}

func storeCases() []rpcCase {
	st := storev1.NewStoreServiceClient
	return []rpcCase{
		{"GetCapabilities", "store", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := st(c).GetCapabilities(ctx, &storev1.GetCapabilitiesRequest{})
			return err
		}, map[string]codes.Code{anon: codes.OK, carol: codes.OK, bob: codes.OK, alice: codes.OK}},
		{"Get", "store", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := drain(st(c).Get(ctx, &storev1.GetRequest{Key: "data/raw"}))
			return err
		}, denyAll},
		{"GetPartialValues", "store", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := drain(st(c).GetPartialValues(ctx, &storev1.GetPartialValuesRequest{Ranges: []*storev1.KeyRange{{Key: "data/raw"}, {Key: "data/nope"}}}))
			return err
		}, denyAll},
		{"GetPartialValuesShared", "store", func(ctx context.Context, c *grpc.ClientConn) error {
			return sharedReads(ctx, st(c), []string{"data/raw", "data/nope"})
		}, denyAll},
		{"Set", "store", func(ctx context.Context, c *grpc.ClientConn) error {
			return set(ctx, st(c), "data/new", "x")
		}, denyAll},
		{"SetPartialValues", "store", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := st(c).SetPartialValues(ctx, &storev1.SetPartialValuesRequest{Writes: []*storev1.PartialWrite{{Key: "data/raw", Offset: 0, Data: []byte("W")}}})
			return err
		}, denyAll},
		{"Erase", "store", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := st(c).Erase(ctx, &storev1.EraseRequest{Key: "data/raw"})
			return err
		}, denyAll},
		{"EraseValues", "store", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := st(c).EraseValues(ctx, &storev1.EraseValuesRequest{Keys: []string{"data/raw"}})
			return err
		}, denyAll},
		{"ErasePrefix", "store", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := st(c).ErasePrefix(ctx, &storev1.ErasePrefixRequest{Prefix: "data/"})
			return err
		}, denyAll},
		{"List", "store", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := drain(st(c).List(ctx, &storev1.ListRequest{}))
			return err
		}, map[string]codes.Code{anon: codes.PermissionDenied, carol: codes.PermissionDenied, bob: codes.OK, alice: codes.OK}},
		{"ListPrefix", "store", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := drain(st(c).ListPrefix(ctx, &storev1.ListPrefixRequest{Prefix: "data/"}))
			return err
		}, denyAll},
		{"ListDir", "store", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := drain(st(c).ListDir(ctx, &storev1.ListDirRequest{Prefix: "data/"}))
			return err
		}, denyAll},
	}
}

func arrayCases() []rpcCase {
	ar := gatewayv1.NewArrayServiceClient
	cd := codecv1.NewCodecServiceClient
	spec := &codecv1.ChunkSpec{DataType: "int32", ChunkShape: []uint64{2}, FillValue: make([]byte, 4), CodecsJson: codecsJSON}
	codecWant := map[string]codes.Code{anon: codes.Unauthenticated, carol: codes.OK, bob: codes.OK, alice: codes.OK}
	return []rpcCase{
		{"GetNode", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := ar(c).GetNode(ctx, &gatewayv1.GetNodeRequest{Path: "data/arr"})
			return err
		}, denyAll},
		{"ListChildren", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := drain(ar(c).ListChildren(ctx, &gatewayv1.ListChildrenRequest{Path: "data", Recursive: true}))
			return err
		}, denyAll},
		{"CreateGroup", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := ar(c).CreateGroup(ctx, &gatewayv1.CreateGroupRequest{Path: "data/g"})
			return err
		}, denyAll},
		{"CreateArray", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := ar(c).CreateArray(ctx, &gatewayv1.CreateArrayRequest{Path: "data/a2", Shape: []uint64{4}, DataType: "int32", ChunkShape: []uint64{2}})
			return err
		}, denyAll},
		{"UpdateAttributes", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := ar(c).UpdateAttributes(ctx, &gatewayv1.UpdateAttributesRequest{Path: "data/arr", AttributesJson: `{"x":1}`})
			return err
		}, denyAll},
		{"DeleteNode", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := ar(c).DeleteNode(ctx, &gatewayv1.DeleteNodeRequest{Path: "data/arr"})
			return err
		}, denyAll},
		{"ResizeArray", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := ar(c).ResizeArray(ctx, &gatewayv1.ResizeArrayRequest{Path: "data/arr", Shape: []uint64{2}})
			return err
		}, denyAll},
		{"ReadSlab", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := drain(ar(c).ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "data/arr"}))
			return err
		}, denyAll},
		{"ReadSlabSmall", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := ar(c).ReadSlabSmall(ctx, &gatewayv1.ReadSlabSmallRequest{Path: "data/arr"})
			return err
		}, denyAll},
		// Opening the connection needs no permission; the read over it
		// is a ReadSlabSmall call of the caller who opened it.
		{"OpenSmallReads", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			sc, err := openSmallReads(ctx, c)
			if err != nil {
				return err
			}
			defer sc.Close()
			return smallRead(sc, &gatewayv1.ReadSlabSmallRequest{Path: "data/arr"})
		}, denyAll},
		{"ReadSlabShared", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			s, err := ar(c).ReadSlabShared(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&gatewayv1.ReadSlabSharedRequest{Message: &gatewayv1.ReadSlabSharedRequest_Read{Read: &gatewayv1.ReadSlabRequest{Path: "data/arr"}}}); err != nil && err != io.EOF {
				return err
			}
			for {
				m, err := s.Recv()
				if err == io.EOF {
					return nil
				}
				if err != nil {
					return err
				}
				if h := m.GetHeader(); h != nil && h.GetSharedSegment() != nil {
					// Take blocks inline.
					if err := s.Send(&gatewayv1.ReadSlabSharedRequest{Message: &gatewayv1.ReadSlabSharedRequest_Attach{Attach: &gatewayv1.SharedAttach{}}}); err != nil {
						return err
					}
					s.CloseSend()
				}
			}
		}, denyAll},
		{"WriteSlab", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			return writeSlab(ctx, ar(c), "data/arr", 9)
		}, denyAll},
		{"WriteSlabShared", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			// Memory that is not the caller's: refused (OK, nothing
			// written) once authorized.
			_, err := ar(c).WriteSlabShared(ctx, &gatewayv1.WriteSlabSharedRequest{Path: "data/arr",
				Source: &gatewayv1.SharedDestination{Pid: 1, Fd: 0, Size: 16, Token: make([]byte, 16)}})
			return err
		}, denyAll},
		{"Encode", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := cd(c).Encode(ctx, &codecv1.EncodeRequest{Spec: spec, Chunks: []*codecv1.Chunk{{Data: make([]byte, 8)}}})
			return err
		}, codecWant},
		{"Decode", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := cd(c).Decode(ctx, &codecv1.DecodeRequest{Spec: spec, Encoded: [][]byte{make([]byte, 8)}})
			return err
		}, codecWant},
		{"Process", "gateway", func(ctx context.Context, c *grpc.ClientConn) error {
			s, err := cd(c).Process(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&codecv1.ProcessRequest{Id: 1, Work: &codecv1.ProcessRequest_Encode{Encode: &codecv1.EncodeRequest{Spec: spec, Chunks: []*codecv1.Chunk{{Data: make([]byte, 8)}}}}}); err != nil && err != io.EOF {
				return err
			}
			_, err = s.Recv()
			s.CloseSend()
			return err
		}, codecWant},
	}
}

// allCases are the cases of both matrices (TestMatrix,
// TestMatrixRealCredentials): every method of the three services, the
// StoreService ones both on a store server and through the gateway's
// pass-through.
func allCases() []rpcCase {
	var cases []rpcCase
	for _, c := range storeCases() {
		cases = append(cases, c)
		c.kind, c.name = "gateway", c.name+"/pass-through"
		cases = append(cases, c)
	}
	return append(cases, arrayCases()...)
}

// TestMatrix calls every RPC of the three services as an anonymous
// caller, an authenticated one without any rule, one with permissions on
// a sibling prefix only and one with permission, and checks the code and
// that a refused call changed nothing in the store.
func TestMatrix(t *testing.T) {
	cv := coverage{}
	defer cv.check(t)
	for _, c := range allCases() {
		for _, who := range []string{anon, carol, bob, alice} {
			name := who
			if name == "" {
				name = "anonymous"
			}
			t.Run(c.kind+"/"+c.name+"/"+name, func(t *testing.T) {
				e := newEnv(t, c.kind)
				before := e.snapshot(t)
				ctx, cancel := context.WithTimeout(as(who), 10*time.Second)
				defer cancel()
				e.calls.take()
				err := c.call(ctx, e.conn)
				cv.add(t, c, e.calls.take())
				want := c.want[who]
				if got := status.Code(err); got != want {
					t.Fatalf("code %v (%v), want %v", got, err, want)
				}
				if want == codes.PermissionDenied {
					msg := status.Convert(err).Message()
					if !strings.Contains(msg, "permission") || !strings.Contains(msg, `"`) {
						t.Errorf("denial %q does not name the permission and the prefix", msg)
					}
				}
				if want != codes.OK {
					if after := e.snapshot(t); !maps(before, after) {
						t.Errorf("a refused call changed the store:\nbefore %v\nafter  %v", before, after)
					}
				}
			})
		}
	}
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestEveryMethodHasARule: a method added to a service without a rule
// would be refused for everyone; this names it.
func TestEveryMethodHasARule(t *testing.T) {
	for _, d := range []grpc.ServiceDesc{storev1.StoreService_ServiceDesc, gatewayv1.ArrayService_ServiceDesc, codecv1.CodecService_ServiceDesc} {
		var names []string
		for _, m := range d.Methods {
			names = append(names, m.MethodName)
		}
		for _, s := range d.Streams {
			names = append(names, s.StreamName)
		}
		for _, n := range names {
			if !authzgrpc.HasRule("/" + d.ServiceName + "/" + n) {
				t.Errorf("%s/%s has no authorization rule", d.ServiceName, n)
			}
		}
	}
}

func code(t *testing.T, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("code %v (%v), want %v", got, err, want)
	}
}

// TestKeySpellings: no spelling of a key gets out of the prefix alice
// holds ("data"): non-canonical spellings are InvalidArgument before any
// check, and percent-encoded or look-alike separators are other keys,
// outside her prefix; nothing is written either way.
func TestKeySpellings(t *testing.T) {
	e := newEnv(t, "gateway")
	st := storev1.NewStoreServiceClient(e.conn)
	ar := gatewayv1.NewArrayServiceClient(e.conn)
	ctx := as(alice)
	before := e.snapshot(t)
	invalid := []string{"data/../other/raw", "data//raw", "./data/raw", "data/./raw", "/data/raw", "data/raw/", "data/\x00", "data/.zarrgate-tmp-x", ""}
	for _, k := range invalid {
		code(t, set(ctx, st, k, "evil"), codes.InvalidArgument)
		_, err := drain(st.Get(ctx, &storev1.GetRequest{Key: k}))
		code(t, err, codes.InvalidArgument)
		_, err = st.EraseValues(ctx, &storev1.EraseValuesRequest{Keys: []string{"data/raw", k}})
		code(t, err, codes.InvalidArgument)
	}
	for _, p := range []string{"data/../other", "data//arr", "./other/arr", "/other/arr", "other/arr/"} {
		code(t, writeSlab(ctx, ar, p, 66), codes.InvalidArgument)
		_, err := ar.DeleteNode(ctx, &gatewayv1.DeleteNodeRequest{Path: p})
		code(t, err, codes.InvalidArgument)
	}
	for _, p := range []string{"data/../", "data//", "data"} {
		_, err := st.ErasePrefix(ctx, &storev1.ErasePrefixRequest{Prefix: p})
		code(t, err, codes.InvalidArgument)
	}
	outside := []string{
		"data%2F..%2Fother%2Fraw", // percent-encoding is not decoded: one segment, not under data/
		"data%2fx",
		"data\u2215raw", // DIVISION SLASH
		"data\uff0fraw", // FULLWIDTH SOLIDUS
		"\uff44ata/raw", // FULLWIDTH d
		"dat\u0430/raw", // CYRILLIC a
		"dataX/k",       // prefixes match at segment boundaries
		"data.raw",
	}
	for _, k := range outside {
		err := set(ctx, st, k, "evil")
		code(t, err, codes.PermissionDenied)
		_, err = drain(st.Get(ctx, &storev1.GetRequest{Key: k}))
		code(t, err, codes.PermissionDenied)
	}
	if after := e.snapshot(t); !maps(before, after) {
		t.Errorf("refused calls changed the store:\nbefore %v\nafter  %v", before, after)
	}
	// The grant itself works on the exact prefix and below.
	if err := set(ctx, st, "data", "ok"); err != nil {
		t.Fatal(err)
	}
	if err := set(ctx, st, "data/x/y", "ok"); err != nil {
		t.Fatal(err)
	}
}

// TestListingFilters: erin may read data/arr only. Listings of its parents
// show nothing else, its parent's metadata documents (which may carry
// consolidated metadata) are refused, and listing a parent under which
// she holds nothing is refused.
func TestListingFilters(t *testing.T) {
	e := newEnv(t, "gateway")
	st := storev1.NewStoreServiceClient(e.conn)
	ar := gatewayv1.NewArrayServiceClient(e.conn)
	ctx := as("erin")

	resps, err := drain(st.List(ctx, &storev1.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range resps {
		keys = append(keys, r.GetKeys()...)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "data/arr/") {
			t.Errorf("List shows %q to erin", k)
		}
	}
	if !slices.Contains(keys, "data/arr/zarr.json") {
		t.Errorf("List does not show erin her own array's keys: %v", keys)
	}

	dirs, err := drain(st.ListDir(ctx, &storev1.ListDirRequest{Prefix: ""}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range dirs {
		got = append(got, r.GetKeys()...)
		got = append(got, r.GetPrefixes()...)
	}
	if !slices.Equal(got, []string{"data/"}) {
		t.Errorf("ListDir(\"\") shows erin %v, want [data/]", got)
	}
	dirs, err = drain(st.ListDir(ctx, &storev1.ListDirRequest{Prefix: "data/"}))
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, r := range dirs {
		got = append(got, r.GetKeys()...)
		got = append(got, r.GetPrefixes()...)
	}
	if !slices.Equal(got, []string{"data/arr/"}) {
		t.Errorf("ListDir(data/) shows erin %v, want [data/arr/] (not data/raw nor data/zarr.json)", got)
	}

	nodes, err := drain(ar.ListChildren(ctx, &gatewayv1.ListChildrenRequest{Path: "", Recursive: true}))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, r := range nodes {
		for _, n := range r.GetNodes() {
			paths = append(paths, n.GetPath())
		}
	}
	if !slices.Equal(paths, []string{"data/arr"}) {
		t.Errorf("ListChildren(\"\", recursive) shows erin %v, want [data/arr]", paths)
	}

	// Forbidden parents.
	_, err = drain(st.ListPrefix(ctx, &storev1.ListPrefixRequest{Prefix: "other/"}))
	code(t, err, codes.PermissionDenied)
	_, err = drain(ar.ListChildren(ctx, &gatewayv1.ListChildrenRequest{Path: "other"}))
	code(t, err, codes.PermissionDenied)
	_, err = ar.GetNode(ctx, &gatewayv1.GetNodeRequest{Path: "data"})
	code(t, err, codes.PermissionDenied)
	// Metadata documents of a node need read on the whole node.
	for _, k := range []string{"data/zarr.json", "zarr.json", "data/.zmetadata", "data/.zgroup"} {
		_, err = drain(st.Get(ctx, &storev1.GetRequest{Key: k}))
		code(t, err, codes.PermissionDenied)
	}
	if _, err := drain(st.Get(ctx, &storev1.GetRequest{Key: "data/arr/zarr.json"})); err != nil {
		t.Fatal(err)
	}
	if _, err := drain(ar.ReadSlab(ctx, &gatewayv1.ReadSlabRequest{Path: "data/arr"})); err != nil {
		t.Fatal(err)
	}
}

// TestConsolidatedMetadata: a group's metadata documents may carry the
// metadata of everything below it (zarr.json's consolidated_metadata,
// .zmetadata, NCZarr's lists of children), so reading one needs read on
// the whole group: a grant on the document's key alone does not do.
// (Denied, not filtered: the documents are served as stored bytes, with
// their generation, and ranged reads of them must stay consistent.)
func TestConsolidatedMetadata(t *testing.T) {
	e := newEnv(t, "gateway")
	st := storev1.NewStoreServiceClient(e.conn)
	ar := gatewayv1.NewArrayServiceClient(e.conn)
	doc := `{"zarr_format":3,"node_type":"group","attributes":{},"consolidated_metadata":{"kind":"inline","must_understand":false,"metadata":{"other/arr":{"zarr_format":3,"node_type":"group"}}}}`
	code(t, set(as("root;ops"), st, "zarr.json", doc), codes.OK)
	code(t, set(as("root;ops"), st, "data/.zmetadata", `{"zarr_consolidated_format":1,"metadata":{}}`), codes.OK)
	for _, k := range []string{"zarr.json", "data/.zmetadata"} {
		_, err := drain(st.Get(as("hal"), &storev1.GetRequest{Key: k}))
		code(t, err, codes.PermissionDenied)
		_, err = drain(st.GetPartialValues(as("hal"), &storev1.GetPartialValuesRequest{Ranges: []*storev1.KeyRange{{Key: k}}}))
		code(t, err, codes.PermissionDenied)
	}
	_, err := ar.GetNode(as("hal"), &gatewayv1.GetNodeRequest{Path: ""})
	code(t, err, codes.PermissionDenied)
	// With read on the group, the document is readable.
	_, err = drain(st.Get(as("root;ops"), &storev1.GetRequest{Key: "zarr.json"}))
	code(t, err, codes.OK)
	_, err = drain(st.Get(as(alice), &storev1.GetRequest{Key: "data/.zmetadata"}))
	code(t, err, codes.OK)
}

// sharedReads makes the reads, one after the other, on one
// GetPartialValuesShared call (values inline: it does not attach an
// offered segment), and returns the call's status.
func sharedReads(ctx context.Context, st storev1.StoreServiceClient, reads ...[]string) error {
	call, err := st.GetPartialValuesShared(ctx)
	if err != nil {
		return err
	}
	for i, keys := range reads {
		var ranges []*storev1.KeyRange
		for _, k := range keys {
			ranges = append(ranges, &storev1.KeyRange{Key: k})
		}
		if err := call.Send(&storev1.GetPartialValuesSharedRequest{Read: &storev1.GetPartialValuesRequest{Ranges: ranges}}); err != nil {
			break // the status comes from Recv
		}
		if i == 0 {
			offer, err := call.Recv()
			if err != nil {
				return err
			}
			if offer.GetSegment() != nil {
				no := false
				if err := call.Send(&storev1.GetPartialValuesSharedRequest{Attach: &no}); err != nil {
					break
				}
			}
		}
		for done := 0; done < len(keys); {
			resp, err := call.Recv()
			if err != nil {
				return err
			}
			for _, p := range resp.GetParts() {
				if p.GetLast() {
					done++
				}
			}
		}
	}
	call.CloseSend()
	for {
		if _, err := call.Recv(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// TestSharedLaterReadsChecked: every read of a GetPartialValuesShared
// call is authorized, not only the first: a later read naming a key the
// caller may not read ends the call with PermissionDenied, and is audited.
func TestSharedLaterReadsChecked(t *testing.T) {
	for _, kind := range []string{"store", "gateway"} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t, kind)
			st := storev1.NewStoreServiceClient(e.conn)
			code(t, sharedReads(as(alice), st, []string{"data/raw"}, []string{"data/raw", "data/nope"}), codes.OK)
			err := sharedReads(as(alice), st, []string{"data/raw"}, []string{"data/raw", "other/raw"})
			code(t, err, codes.PermissionDenied)
			if msg := status.Convert(err).Message(); !strings.Contains(msg, `"other/raw"`) {
				t.Errorf("message %q does not name the refused key", msg)
			}
			var refused int
			for _, r := range e.audit.records(t) {
				if strings.HasSuffix(fmt.Sprint(r["method"]), "GetPartialValuesShared") && r["denied"] == true {
					refused++
				}
			}
			if refused == 0 {
				t.Errorf("no audit record of the refusal: %v", e.audit.records(t))
			}
		})
	}
}

// TestBatchAllOrNothing: GetPartialValues and EraseValues mixing keys the
// caller may and may not touch are refused whole, before any key is
// touched, and the refusal names the first forbidden key.
func TestBatchAllOrNothing(t *testing.T) {
	e := newEnv(t, "store")
	st := storev1.NewStoreServiceClient(e.conn)
	ctx := as(alice)
	before := e.snapshot(t)
	_, err := drain(st.GetPartialValues(ctx, &storev1.GetPartialValuesRequest{Ranges: []*storev1.KeyRange{{Key: "data/raw"}, {Key: "other/raw"}, {Key: "data/raw"}}}))
	code(t, err, codes.PermissionDenied)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, `"other/raw"`) || !strings.Contains(msg, "1 of the 3") || !strings.Contains(msg, `"read"`) {
		t.Errorf("message %q", msg)
	}
	_, err = st.EraseValues(ctx, &storev1.EraseValuesRequest{Keys: []string{"data/raw", "other/raw"}})
	code(t, err, codes.PermissionDenied)
	_, err = st.SetPartialValues(ctx, &storev1.SetPartialValuesRequest{Writes: []*storev1.PartialWrite{{Key: "data/raw", Data: []byte("X")}, {Key: "dataX/k", Data: []byte("X")}}})
	code(t, err, codes.PermissionDenied)
	if after := e.snapshot(t); !maps(before, after) {
		t.Errorf("a refused batch changed the store:\nbefore %v\nafter  %v", before, after)
	}
	// Erasing everything needs admin, not delete on every prefix.
	_, err = st.ErasePrefix(ctx, &storev1.ErasePrefixRequest{Prefix: ""})
	code(t, err, codes.PermissionDenied)
	if msg := status.Convert(err).Message(); !strings.Contains(msg, `"admin"`) {
		t.Errorf("message %q does not name admin", msg)
	}
	if after := e.snapshot(t); !maps(before, after) {
		t.Errorf("a refused erase changed the store")
	}
	_, err = st.ErasePrefix(as("root;ops"), &storev1.ErasePrefixRequest{Prefix: ""})
	code(t, err, codes.OK)
	if after := e.snapshot(t); len(after) != 0 {
		t.Errorf("admin's ErasePrefix(\"\") left %v", after)
	}
}

// TestMetadataPermittedChunksNot: frank may write data/arr/zarr.json (the
// metadata document, a key) and gina data/arr/c (the chunks' subtree) but
// neither holds write on the node data/arr. WriteSlab writes chunk keys
// under the node and changes what its metadata describes: it needs write
// on the whole node, so both are refused and no chunk changes. Raw writes
// of the keys each holds stay allowed.
func TestMetadataPermittedChunksNot(t *testing.T) {
	e := newEnv(t, "gateway")
	ar := gatewayv1.NewArrayServiceClient(e.conn)
	st := storev1.NewStoreServiceClient(e.conn)
	before := e.snapshot(t)
	for _, who := range []string{"frank", "gina"} {
		err := writeSlab(as(who), ar, "data/arr", 5)
		code(t, err, codes.PermissionDenied)
		if !strings.Contains(status.Convert(err).Message(), `"write" permission on "data/arr"`) {
			t.Errorf("message %q", status.Convert(err).Message())
		}
		_, err = ar.UpdateAttributes(as(who), &gatewayv1.UpdateAttributesRequest{Path: "data/arr", AttributesJson: `{}`})
		code(t, err, codes.PermissionDenied)
	}
	if after := e.snapshot(t); !maps(before, after) {
		t.Errorf("refused writes changed the store")
	}
	code(t, set(as("frank"), st, "data/arr/zarr.json", before["data/arr/zarr.json"]), codes.OK)
	code(t, set(as("gina"), st, "data/arr/c/0", before["data/arr/c/0"]), codes.OK)
	code(t, set(as("gina"), st, "data/arr/zarr.json", "x"), codes.PermissionDenied)
}

// TestAudit: writes and deletes (allowed or not) and every denial are
// audit records with the principal, method, permission, keys or prefix
// and code; allowed reads are not.
func TestAudit(t *testing.T) {
	e := newEnv(t, "gateway")
	st := storev1.NewStoreServiceClient(e.conn)
	ar := gatewayv1.NewArrayServiceClient(e.conn)
	n0 := len(e.audit.records(t)) // the seeding writes

	code(t, set(as(bob), st, "data/x", "v"), codes.PermissionDenied)
	_, err := st.Erase(as(alice), &storev1.EraseRequest{Key: "data/raw"})
	code(t, err, codes.OK)
	_, err = drain(st.Get(as(alice), &storev1.GetRequest{Key: "data/arr/zarr.json"}))
	code(t, err, codes.OK) // not audited
	_, err = drain(st.Get(as(carol), &storev1.GetRequest{Key: "data/raw"}))
	code(t, err, codes.PermissionDenied)
	_, err = st.ErasePrefix(as(alice), &storev1.ErasePrefixRequest{Prefix: "data/"})
	code(t, err, codes.OK)
	_, err = ar.DeleteNode(as(alice), &gatewayv1.DeleteNodeRequest{Path: ""})
	code(t, err, codes.PermissionDenied)
	_, err = codecv1.NewCodecServiceClient(e.conn).Encode(as(anon), &codecv1.EncodeRequest{})
	code(t, err, codes.Unauthenticated)

	recs := e.audit.records(t)[n0:]
	type want struct {
		principal, method, perm, code string
		denied                        bool
		keys                          []string
		prefix                        *string
	}
	pfx := func(s string) *string { return &s }
	wants := []want{
		{"user:bob", "/zarrgate.store.v1.StoreService/Set", "write", "PermissionDenied", true, []string{"data/x"}, nil},
		{"user:alice", "/zarrgate.store.v1.StoreService/Erase", "delete", "OK", false, []string{"data/raw"}, nil},
		{"user:carol", "/zarrgate.store.v1.StoreService/Get", "read", "PermissionDenied", true, []string{"data/raw"}, nil},
		{"user:alice", "/zarrgate.store.v1.StoreService/ErasePrefix", "delete", "OK", false, nil, pfx("data/")},
		{"user:alice", "/zarrgate.gateway.v1.ArrayService/DeleteNode", "admin", "PermissionDenied", true, []string{""}, nil},
		{"anonymous", "/zarrgate.codec.v1.CodecService/Encode", "", "Unauthenticated", true, nil, nil},
	}
	if len(recs) != len(wants) {
		t.Fatalf("%d audit records, want %d: %v", len(recs), len(wants), recs)
	}
	for i, w := range wants {
		r := recs[i]
		str := func(k string) string { s, _ := r[k].(string); return s }
		if str("logger") != authz.AuditLoggerName || str("msg") != "audit" || str("principal") != w.principal || str("method") != w.method ||
			str("permission") != w.perm || str("code") != w.code || r["denied"] != w.denied {
			t.Errorf("record %d = %v, want %+v", i, r, w)
		}
		var keys []string
		if ks, ok := r["keys"].([]any); ok {
			for _, k := range ks {
				keys = append(keys, k.(string))
			}
		}
		if !slices.Equal(keys, w.keys) {
			t.Errorf("record %d keys %v, want %v", i, keys, w.keys)
		}
		if p, ok := r["prefix"].(string); (w.prefix == nil) == ok || (ok && p != *w.prefix) {
			t.Errorf("record %d prefix %v, want %v", i, r["prefix"], w.prefix)
		}
		if w.denied && str("error") == "" {
			t.Errorf("record %d: a denial without its message", i)
		}
	}
}

// TestNoPolicyAuditOnly: with only an audit log, nothing is refused and
// writes are still recorded.
func TestNoPolicyAuditOnly(t *testing.T) {
	buf := &syncBuffer{}
	cfg := authzgrpc.Config{Audit: authz.NewAuditor(buf)}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), authzgrpc.ServerOptions(cfg)...)
	store := storesvc.Wrap(memory.New())
	storeserver.New(store).Register(srv)
	codecsvc.NewServer(codecsvc.NewLocal()).Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st := storev1.NewStoreServiceClient(conn)
	code(t, set(context.Background(), st, "a/b", "v"), codes.OK)
	_, err = st.ErasePrefix(context.Background(), &storev1.ErasePrefixRequest{Prefix: ""})
	code(t, err, codes.OK)
	_, err = codecv1.NewCodecServiceClient(conn).Encode(context.Background(), &codecv1.EncodeRequest{})
	if c := status.Code(err); c == codes.Unauthenticated || c == codes.PermissionDenied {
		t.Fatalf("without a policy CodecService refused: %v", err)
	}
	recs := buf.records(t)
	if len(recs) != 2 || recs[0]["principal"] != "anonymous" || recs[1]["method"] != "/zarrgate.store.v1.StoreService/ErasePrefix" {
		t.Fatalf("records %v", recs)
	}
}

// TestSecondHeader: a stream's later message cannot name another key than
// the first, checked one (bob may write other/, not data/).
func TestSecondHeader(t *testing.T) {
	e := newEnv(t, "gateway")
	before := e.snapshot(t)
	s, err := storev1.NewStoreServiceClient(e.conn).Set(as(bob))
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&storev1.SetRequest{Header: &storev1.SetHeader{Key: "other/new"}, Data: []byte("a")})
	s.Send(&storev1.SetRequest{Header: &storev1.SetHeader{Key: "data/new"}, Data: []byte("b")})
	_, err = s.CloseAndRecv()
	code(t, err, codes.InvalidArgument)
	w, err := gatewayv1.NewArrayServiceClient(e.conn).WriteSlab(as(bob))
	if err != nil {
		t.Fatal(err)
	}
	w.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Header{Header: &gatewayv1.WriteSlabHeader{Path: "other/arr"}}})
	w.Send(&gatewayv1.WriteSlabRequest{Message: &gatewayv1.WriteSlabRequest_Header{Header: &gatewayv1.WriteSlabHeader{Path: "data/arr"}}})
	_, err = w.CloseAndRecv()
	code(t, err, codes.InvalidArgument)
	if after := e.snapshot(t); !maps(before, after) {
		t.Errorf("the store changed:\nbefore %v\nafter  %v", before, after)
	}
}

// lenientStore is a StoreService whose Set takes any number of headers
// and records their keys: a handler that does not refuse a second header,
// so that TestSecondHeaderReachesNoHandler sees the interceptor's own
// check (the real servers refuse it too).
type lenientStore struct {
	storev1.UnimplementedStoreServiceServer
	mu   sync.Mutex
	keys []string
}

func (l *lenientStore) Set(s grpc.ClientStreamingServer[storev1.SetRequest, storev1.SetResponse]) error {
	for {
		m, err := s.Recv()
		if err == io.EOF {
			return s.SendAndClose(&storev1.SetResponse{})
		}
		if err != nil {
			return err
		}
		if h := m.GetHeader(); h != nil {
			l.mu.Lock()
			l.keys = append(l.keys, h.GetKey())
			l.mu.Unlock()
		}
	}
}

// TestSecondHeaderReachesNoHandler: a stream's later header naming a key
// the first did not is refused by the interceptor before the handler
// receives it, whatever the handler would do with it.
func TestSecondHeaderReachesNoHandler(t *testing.T) {
	pol, err := authz.Parse([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	cfg := authzgrpc.Config{Policy: func() *authz.Policy { return pol }}
	srv := rpc.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), append(testAuthn(), authzgrpc.ServerOptions(cfg)...)...)
	ls := &lenientStore{}
	storev1.RegisterStoreServiceServer(srv, ls)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := rpc.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s, err := storev1.NewStoreServiceClient(conn).Set(as(bob))
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&storev1.SetRequest{Header: &storev1.SetHeader{Key: "other/new"}, Data: []byte("a")})
	s.Send(&storev1.SetRequest{Header: &storev1.SetHeader{Key: "data/new"}, Data: []byte("b")})
	_, err = s.CloseAndRecv()
	code(t, err, codes.InvalidArgument)
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if slices.Contains(ls.keys, "data/new") {
		t.Errorf("the handler received the second header: keys %v", ls.keys)
	}
}

// TestCreateParents: creating a node creates the groups missing above it,
// and each needs write as the node does: write on proj/team does not let
// one create proj/team/g while proj has no group (that would write
// proj/zarr.json). The refusal names the parent and nothing is written,
// not even the parents the caller may write; the audit log records a
// denial. Once proj exists, the same call goes through, creating
// proj/team.
func TestCreateParents(t *testing.T) {
	e := newEnv(t, "gateway")
	ar := gatewayv1.NewArrayServiceClient(e.conn)
	before := e.snapshot(t)
	n0 := len(e.audit.records(t))
	for _, call := range []func() error{
		func() error {
			_, err := ar.CreateGroup(as("ivan"), &gatewayv1.CreateGroupRequest{Path: "proj/team/g"})
			return err
		},
		func() error {
			_, err := ar.CreateArray(as("ivan"), &gatewayv1.CreateArrayRequest{Path: "proj/team/a", Shape: []uint64{4}, DataType: "int32", ChunkShape: []uint64{2}, CodecsJson: codecsJSON})
			return err
		},
	} {
		err := call()
		code(t, err, codes.PermissionDenied)
		if msg := status.Convert(err).Message(); !strings.Contains(msg, `user:ivan needs "write" permission on "proj"`) || !strings.Contains(msg, `missing parent group "proj"`) {
			t.Errorf("message %q; want it to name the parent proj", msg)
		}
	}
	if after := e.snapshot(t); !maps(before, after) {
		t.Errorf("refused creates changed the store")
	}
	recs := e.audit.records(t)[n0:]
	if len(recs) != 2 || recs[0]["denied"] != true || recs[0]["code"] != "PermissionDenied" || recs[0]["principal"] != "user:ivan" {
		t.Errorf("audit records of the refusals: %v", recs)
	}

	if _, err := ar.CreateGroup(as("root;ops"), &gatewayv1.CreateGroupRequest{Path: "proj"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ar.CreateGroup(as("ivan"), &gatewayv1.CreateGroupRequest{Path: "proj/team/g"}); err != nil {
		t.Fatalf("ivan's create once proj exists: %v", err)
	}
	if _, ok := e.snapshot(t)["proj/team/zarr.json"]; !ok {
		t.Errorf("the missing parent proj/team was not created")
	}
}
