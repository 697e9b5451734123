// Package authzgrpc enforces an authz.Policy on every call of
// StoreService, ArrayService and CodecService, in one place: a pair of
// gRPC server interceptors. For each method it knows which permission the
// request needs on which keys, prefixes or node paths, decided on the
// request message as the handler will see it (for streams, the first
// message, checked when it arrives and before the handler can act on it).
// Listings are filtered to what the caller may read. Writes, deletes and
// denials are written to the audit log.
//
// The caller is auth.FromContext(ctx); a call without a principal (no
// authentication configured) is anonymous. The interceptors must run
// after the authentication interceptor that sets the principal.
package authzgrpc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/gateway"
	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"
	gatewayv1 "github.com/zarrgate/zarrgate/gen/zarrgate/gateway/v1"
	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"
	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/authz"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
	"github.com/zarrgate/zarrgate/storesvc"
)

// Config is what the interceptors enforce and where they report.
type Config struct {
	// Policy returns the policy in force (a Watcher's Policy method); nil,
	// or a nil result, enforces nothing (every call is allowed, and still
	// audited).
	Policy func() *authz.Policy
	// Audit receives the audit records; nil writes none.
	Audit *authz.Auditor
	// Credentials, when the server authenticates its callers, names the
	// credentials it accepts (auth.Authenticator.Accepted). A call without
	// credentials that the policy refuses is then Unauthenticated, asking
	// for them, rather than PermissionDenied: presenting credentials is
	// what the caller can do about it (as HTTP's 401 against 403). Empty:
	// no authentication, nobody has credentials to present, and refusals
	// are PermissionDenied for everyone.
	Credentials string
}

// ServerOptions returns the interceptors as server options, to be given to
// rpc.NewServer after the authentication interceptor's.
func ServerOptions(c Config) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(c.Unary), grpc.ChainStreamInterceptor(c.Stream)}
}

// class is what a method does, for the audit log.
type class uint8

const (
	classRead class = iota
	classWrite
	classList
	classCodec
	classOpen // no permission needed
)

// methods lists every guarded method and its class; a guarded service's
// method missing here is refused (fail closed).
var methods = map[string]class{
	storev1.StoreService_GetCapabilities_FullMethodName:        classOpen,
	storev1.StoreService_Get_FullMethodName:                    classRead,
	storev1.StoreService_GetPartialValues_FullMethodName:       classRead,
	storev1.StoreService_GetPartialValuesShared_FullMethodName: classRead,
	storev1.StoreService_Set_FullMethodName:                    classWrite,
	storev1.StoreService_SetPartialValues_FullMethodName:       classWrite,
	storev1.StoreService_Erase_FullMethodName:                  classWrite,
	storev1.StoreService_EraseValues_FullMethodName:            classWrite,
	storev1.StoreService_ErasePrefix_FullMethodName:            classWrite,
	storev1.StoreService_List_FullMethodName:                   classList,
	storev1.StoreService_ListPrefix_FullMethodName:             classList,
	storev1.StoreService_ListDir_FullMethodName:                classList,

	gatewayv1.ArrayService_GetNode_FullMethodName:          classRead,
	gatewayv1.ArrayService_ListChildren_FullMethodName:     classList,
	gatewayv1.ArrayService_CreateGroup_FullMethodName:      classWrite,
	gatewayv1.ArrayService_CreateArray_FullMethodName:      classWrite,
	gatewayv1.ArrayService_UpdateAttributes_FullMethodName: classWrite,
	gatewayv1.ArrayService_DeleteNode_FullMethodName:       classWrite,
	gatewayv1.ArrayService_ResizeArray_FullMethodName:      classWrite,
	gatewayv1.ArrayService_ReadSlab_FullMethodName:         classRead,
	gatewayv1.ArrayService_ReadSlabSmall_FullMethodName:    classRead,
	// Each read on the connection it opens is a ReadSlabSmall call,
	// authorized as one.
	gatewayv1.ArrayService_OpenSmallReads_FullMethodName:  classOpen,
	gatewayv1.ArrayService_ReadSlabShared_FullMethodName:  classRead,
	gatewayv1.ArrayService_WriteSlab_FullMethodName:       classWrite,
	gatewayv1.ArrayService_WriteSlabShared_FullMethodName: classWrite,

	codecv1.CodecService_Encode_FullMethodName:  classCodec,
	codecv1.CodecService_Decode_FullMethodName:  classCodec,
	codecv1.CodecService_Process_FullMethodName: classCodec,
}

var guardedServices = []string{"/zarrgate.store.v1.StoreService/", "/zarrgate.gateway.v1.ArrayService/", "/zarrgate.codec.v1.CodecService/"}

// HasRule reports whether the interceptors know fullMethod
// ("/package.Service/Method") of a guarded service; those they do not
// know are refused.
func HasRule(fullMethod string) bool {
	_, ok := methods[fullMethod]
	return ok
}

func guarded(method string) bool {
	for _, s := range guardedServices {
		if strings.HasPrefix(method, s) {
			return true
		}
	}
	return false
}

// need is what a request needs: perm on every path (a valid key, or ""
// for the whole store), or, for a listing, read on something under
// list.
type need struct {
	perm    authz.Perm
	paths   []string
	keys    []string // the keys or node paths as named, for the audit log
	prefix  *string  // a prefix-wide call's prefix, for the audit log
	listing bool     // paths[0] is the listed path; results are filtered
}

func ptr(s string) *string { return &s }

// key validates a store key with the store's own rules.
func key(k string) error { return storesvc.ValidateKey(k) }

// prefixPath validates a store prefix ("" or "key/") and returns its path.
func prefixPath(p string) (string, error) {
	if err := storesvc.ValidatePrefix(p); err != nil {
		return "", err
	}
	return strings.TrimSuffix(p, "/"), nil
}

// nodePath validates a node path as the gateway does: "" (the root) or a
// valid key.
func nodePath(p string) error {
	if p == "" {
		return nil
	}
	if err := storesvc.ValidateKey(p); err != nil {
		return errs.New(errs.InvalidArgument, "invalid node path %q: must be empty (the root) or a valid key without leading or trailing \"/\"", p)
	}
	return nil
}

func readKeys(keys []string) (need, error) {
	n := need{perm: authz.Read, keys: keys, paths: make([]string, len(keys))}
	for i, k := range keys {
		if err := key(k); err != nil {
			return n, err
		}
		n.paths[i] = authz.ReadPath(k)
	}
	return n, nil
}

func keysNeed(perm authz.Perm, keys []string) (need, error) {
	for _, k := range keys {
		if err := key(k); err != nil {
			return need{perm: perm, keys: keys}, err
		}
	}
	return need{perm: perm, keys: keys, paths: keys}, nil
}

func nodeNeed(perm authz.Perm, path string) (need, error) {
	n := need{perm: perm, keys: []string{path}}
	if err := nodePath(path); err != nil {
		return n, err
	}
	if path == "" && perm&authz.Delete != 0 {
		n.perm = authz.Admin // deleting the whole hierarchy
	}
	n.paths = []string{path}
	return n, nil
}

func listNeed(path string) need {
	return need{perm: authz.Read, paths: []string{path}, prefix: ptr(path), listing: true}
}

// decide returns what msg, the request (or a stream's first message) of
// method, needs.
func decide(method string, msg any) (need, error) {
	switch m := msg.(type) {
	// StoreService
	case *storev1.GetCapabilitiesRequest:
		return need{}, nil
	case *storev1.GetRequest:
		return readKeys([]string{m.GetKey()})
	case *storev1.GetPartialValuesRequest:
		keys := make([]string, len(m.GetRanges()))
		for i, r := range m.GetRanges() {
			keys[i] = r.GetKey()
		}
		return readKeys(keys)
	case *storev1.GetPartialValuesSharedRequest:
		r := m.GetRead()
		if r == nil {
			return need{perm: authz.Read}, errs.New(errs.InvalidArgument, "get_partial_values_shared: the first message must be a read")
		}
		return decide(method, r)
	case *storev1.SetRequest:
		h := m.GetHeader()
		if h == nil {
			return need{perm: authz.Write}, errs.New(errs.InvalidArgument, "set: the first message must carry the header (key and condition)")
		}
		return keysNeed(authz.Write, []string{h.GetKey()})
	case *storev1.SetPartialValuesRequest:
		keys := make([]string, len(m.GetWrites()))
		for i, w := range m.GetWrites() {
			keys[i] = w.GetKey()
		}
		return keysNeed(authz.Write, keys)
	case *storev1.EraseRequest:
		return keysNeed(authz.Delete, []string{m.GetKey()})
	case *storev1.EraseValuesRequest:
		return keysNeed(authz.Delete, m.GetKeys())
	case *storev1.ErasePrefixRequest:
		n := need{perm: authz.Delete, prefix: ptr(m.GetPrefix())}
		p, err := prefixPath(m.GetPrefix())
		if err != nil {
			return n, err
		}
		if p == "" {
			n.perm = authz.Admin
		}
		n.paths = []string{p}
		return n, nil
	case *storev1.ListRequest:
		return listNeed(""), nil
	case *storev1.ListPrefixRequest:
		p, err := prefixPath(m.GetPrefix())
		if err != nil {
			return need{perm: authz.Read, prefix: ptr(m.GetPrefix())}, err
		}
		return listNeed(p), nil
	case *storev1.ListDirRequest:
		p, err := prefixPath(m.GetPrefix())
		if err != nil {
			return need{perm: authz.Read, prefix: ptr(m.GetPrefix())}, err
		}
		return listNeed(p), nil

	// ArrayService
	case *gatewayv1.GetNodeRequest:
		return nodeNeed(authz.Read, m.GetPath())
	case *gatewayv1.ListChildrenRequest:
		if err := nodePath(m.GetPath()); err != nil {
			return need{perm: authz.Read, prefix: ptr(m.GetPath())}, err
		}
		return listNeed(m.GetPath()), nil
	case *gatewayv1.CreateGroupRequest:
		return nodeNeed(authz.Write, m.GetPath())
	case *gatewayv1.CreateArrayRequest:
		return nodeNeed(authz.Write, m.GetPath())
	case *gatewayv1.UpdateAttributesRequest:
		return nodeNeed(authz.Write, m.GetPath())
	case *gatewayv1.DeleteNodeRequest:
		return nodeNeed(authz.Delete, m.GetPath())
	case *gatewayv1.ResizeArrayRequest:
		// A shrink erases the chunks outside the new shape; the check is
		// made before the current shape is known, so every resize needs
		// both.
		return nodeNeed(authz.Write|authz.Delete, m.GetPath())
	case *gatewayv1.ReadSlabRequest:
		return nodeNeed(authz.Read, m.GetPath())
	case *gatewayv1.ReadSlabSmallRequest:
		return nodeNeed(authz.Read, m.GetPath())
	case *gatewayv1.OpenSmallReadsRequest:
		return need{}, nil
	case *gatewayv1.ReadSlabSharedRequest:
		r := m.GetRead()
		if r == nil {
			return need{perm: authz.Read}, errs.New(errs.InvalidArgument, "read_slab_shared: the first message must be the read (path and selection)")
		}
		return nodeNeed(authz.Read, r.GetPath())
	case *gatewayv1.WriteSlabRequest:
		h := m.GetHeader()
		if h == nil {
			return need{perm: authz.Write}, errs.New(errs.InvalidArgument, "write_slab: the first message must be the header (path and selection)")
		}
		// The array's chunks are keys under its path: writing them needs
		// write on the whole node, whatever is granted on its metadata.
		return nodeNeed(authz.Write, h.GetPath())
	case *gatewayv1.WriteSlabSharedRequest:
		return nodeNeed(authz.Write, m.GetPath())
	}
	return need{}, errs.New(errs.PermissionDenied, "%s: no authorization rule for this request (%T): refused", method, msg)
}

func pathName(p string) string {
	if p == "" {
		return `"" (the whole store)`
	}
	return fmt.Sprintf("%q", p)
}

// check returns nil if p may do what n says under pol, or the
// PermissionDenied error naming the permission and the path
// (Unauthenticated for a caller without credentials, see
// Config.Credentials).
func (c Config) check(pol *authz.Policy, p auth.Principal, method string, n need) error {
	err := check(pol, p, method, n)
	if err == nil || c.Credentials == "" || !authz.IsAnonymous(p) {
		return err
	}
	return errs.New(errs.Unauthenticated, "no credentials: %v; this server needs %s", err, c.Credentials)
}

func check(pol *authz.Policy, p auth.Principal, method string, n need) error {
	if pol == nil {
		return nil
	}
	if n.listing {
		if pol.MaySeeUnder(p, n.paths[0]) {
			return nil
		}
		return errs.New(errs.PermissionDenied, "%s: %s has no %q permission on %s or below it", short(method), authz.PrincipalString(p), "read", pathName(n.paths[0]))
	}
	denied, first := 0, ""
	for _, path := range n.paths {
		if !pol.Allowed(p, n.perm, path) {
			if denied == 0 {
				first = path
			}
			denied++
		}
	}
	if denied == 0 {
		return nil
	}
	more := ""
	if len(n.paths) > 1 {
		more = fmt.Sprintf(" (%d of the %d keys of the call are denied; nothing was done)", denied, len(n.paths))
	}
	return errs.New(errs.PermissionDenied, "%s: %s needs %q permission on %s%s", short(method), authz.PrincipalString(p), n.perm.String(), pathName(first), more)
}

func short(method string) string {
	if i := strings.LastIndexByte(method, '/'); i >= 0 {
		return method[i+1:]
	}
	return method
}

// principal is the caller: anonymous when no authentication put one in
// the context.
func principal(ctx context.Context) auth.Principal {
	p, ok := auth.FromContext(ctx)
	if !ok {
		return auth.Principal{Name: auth.Anonymous, Method: "none"}
	}
	return p
}

func (c Config) policy() *authz.Policy {
	if c.Policy == nil {
		return nil
	}
	return c.Policy()
}

// codecCheck lets only authenticated callers use CodecService, when a
// policy is in force.
func (c Config) codecCheck(p auth.Principal, method string) error {
	if c.policy() == nil || !authz.IsAnonymous(p) {
		return nil
	}
	return errs.New(errs.Unauthenticated, "%s: CodecService accepts only authenticated callers", short(method))
}

// audit writes the record of a call of class cl if it is audited: every
// write and delete, and every refused call (refused: the authorization
// check, not the handler, ended it with err).
func (c Config) audit(ctx context.Context, p auth.Principal, method string, cl class, n need, refused bool, err error) {
	code := grpcerr.Code(err)
	denied := refused && (code == codes.PermissionDenied || code == codes.Unauthenticated)
	if c.Audit == nil || (cl != classWrite && !denied) {
		return
	}
	r := authz.Record{Principal: p, Method: method, Perm: n.perm, Keys: n.keys, Prefix: n.prefix, Denied: denied, Code: code.String()}
	if err != nil {
		r.Error = status.Convert(err).Message()
	}
	c.Audit.Log(ctx, r)
}

// Unary is the unary server interceptor.
func (c Config) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !guarded(info.FullMethod) {
		return handler(ctx, req)
	}
	p := principal(ctx)
	cl, known := methods[info.FullMethod]
	if !known {
		err := grpcerr.ToStatus(errs.New(errs.PermissionDenied, "%s: no authorization rule for this method: refused", info.FullMethod))
		c.audit(ctx, p, info.FullMethod, classWrite, need{}, true, err)
		return nil, err
	}
	if cl == classCodec {
		if err := c.codecCheck(p, info.FullMethod); err != nil {
			err = grpcerr.ToStatus(err)
			c.audit(ctx, p, info.FullMethod, cl, need{}, true, err)
			return nil, err
		}
		return handler(ctx, req)
	}
	pol := c.policy()
	n, err := decide(info.FullMethod, req)
	if err == nil {
		err = c.check(pol, p, info.FullMethod, n)
	}
	if err != nil {
		err = grpcerr.ToStatus(err)
		c.audit(ctx, p, info.FullMethod, cl, n, true, err)
		return nil, err
	}
	var parentRefused atomic.Bool
	if pol != nil && createsParents(req) {
		ctx = gateway.WithParentCheck(ctx, c.parentCheck(pol, p, info.FullMethod, n, &parentRefused))
	}
	resp, err := handler(ctx, req)
	c.audit(ctx, p, info.FullMethod, cl, n, parentRefused.Load(), err)
	return resp, err
}

// createsParents reports whether req creates the groups missing above
// the node it names.
func createsParents(req any) bool {
	switch req.(type) {
	case *gatewayv1.CreateGroupRequest, *gatewayv1.CreateArrayRequest:
		return true
	}
	return false
}

// parentCheck is the check the gateway makes, before writing anything,
// on every missing parent group a create would make (gateway.
// WithParentCheck): write on the parent, as on the node. Writing a
// group's metadata at a/ is writing at a/, whatever call does it, so
// write on a/b/ alone does not let one create a/b/c where a/ has no group
// yet. A refusal names the parent, and is recorded in refused for the
// audit log.
func (c Config) parentCheck(pol *authz.Policy, p auth.Principal, method string, n need, refused *atomic.Bool) func(string) error {
	return func(parent string) error {
		err := c.check(pol, p, method, need{perm: authz.Write, paths: []string{parent}})
		if err == nil {
			return nil
		}
		refused.Store(true)
		node := ""
		if len(n.keys) > 0 {
			node = n.keys[0]
		}
		kind := errs.PermissionDenied
		if errors.Is(err, errs.Unauthenticated) {
			kind = errs.Unauthenticated
		}
		return errs.New(kind, "%w: creating %q would create the missing parent group %s; nothing was created", err, node, pathName(parent))
	}
}

// Stream is the stream server interceptor.
func (c Config) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !guarded(info.FullMethod) {
		return handler(srv, ss)
	}
	ctx := ss.Context()
	p := principal(ctx)
	cl, known := methods[info.FullMethod]
	if !known {
		err := grpcerr.ToStatus(errs.New(errs.PermissionDenied, "%s: no authorization rule for this method: refused", info.FullMethod))
		c.audit(ctx, p, info.FullMethod, classWrite, need{}, true, err)
		return err
	}
	if cl == classCodec {
		if err := c.codecCheck(p, info.FullMethod); err != nil {
			err = grpcerr.ToStatus(err)
			c.audit(ctx, p, info.FullMethod, cl, need{}, true, err)
			return err
		}
		return handler(srv, ss)
	}
	s := &stream{ServerStream: ss, c: c, pol: c.policy(), p: p, method: info.FullMethod}
	err := handler(srv, s)
	s.mu.Lock()
	n, refusal := s.n, s.refusal
	s.mu.Unlock()
	if refusal != nil {
		// The handler returns what RecvMsg returned, or gave up on it:
		// the record is of the refusal.
		c.audit(ctx, p, info.FullMethod, cl, n, true, refusal)
		return refusal
	}
	c.audit(ctx, p, info.FullMethod, cl, n, false, err)
	return err
}

// stream checks the first message a handler receives, before the handler
// sees it, and filters listings the handler sends.
type stream struct {
	grpc.ServerStream
	c      Config
	pol    *authz.Policy // the policy at the call's start, for the whole call
	p      auth.Principal
	method string

	allowed atomic.Bool // the first message was received and allowed

	mu      sync.Mutex
	first   bool // the first message was received and decided
	n       need
	refusal error
}

func (s *stream) RecvMsg(m any) error {
	s.mu.Lock()
	if s.first {
		refused := s.refusal
		s.mu.Unlock()
		if refused != nil {
			return refused
		}
		if err := s.ServerStream.RecvMsg(m); err != nil {
			return err
		}
		if r, ok := m.(*storev1.GetPartialValuesSharedRequest); ok && r.GetRead() != nil {
			// Each read of the stream names its own keys: each is
			// checked as the first was.
			return s.later(r)
		}
		return retarget(m)
	}
	s.mu.Unlock()
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err // EOF before the request, a malformed message...: the handler fails
	}
	n, err := decide(s.method, m)
	if err == nil {
		err = s.c.check(s.pol, s.p, s.method, n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.first, s.n = true, n
	if err != nil {
		s.refusal = grpcerr.ToStatus(err)
		return s.refusal
	}
	s.allowed.Store(true)
	return nil
}

// later decides a later message of a stream that names keys of its own
// (GetPartialValuesShared's reads): allowed, or refused for the rest of
// the call, as a first message is.
func (s *stream) later(m any) error {
	n, err := decide(s.method, m)
	if err == nil {
		err = s.c.check(s.pol, s.p, s.method, n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.n, s.refusal = n, grpcerr.ToStatus(err)
		return s.refusal
	}
	return nil
}

// retarget refuses a later message of a stream that would name another
// key or path than the first one, which was checked: the handlers refuse
// them too, but what was authorized must not depend on it.
func retarget(m any) error {
	var again bool
	switch r := m.(type) {
	case *storev1.SetRequest:
		again = r.GetHeader() != nil
	case *gatewayv1.WriteSlabRequest:
		again = r.GetHeader() != nil
	case *gatewayv1.ReadSlabSharedRequest:
		again = r.GetRead() != nil
	}
	if again {
		return status.Error(codes.InvalidArgument, "only the first message of the stream may name what it reads or writes")
	}
	return nil
}

func (s *stream) SendMsg(m any) error {
	if !s.allowed.Load() {
		return status.Errorf(codes.PermissionDenied, "%s: response before the request was authorized: refused", short(s.method))
	}
	if s.pol == nil {
		return s.ServerStream.SendMsg(m)
	}
	out, send := s.filter(m)
	if !send {
		return nil
	}
	return s.ServerStream.SendMsg(out)
}

// filter returns m with what the caller may not read taken out of a
// listing, and false when nothing is left to send.
func (s *stream) filter(m any) (any, bool) {
	pol, p := s.pol, s.p
	readable := func(path string) bool { return pol.Allowed(p, authz.Read, path) }
	keys := func(in []string) []string {
		out := make([]string, 0, len(in))
		for _, k := range in {
			if readable(k) {
				out = append(out, k)
			}
		}
		return out
	}
	switch r := m.(type) {
	case *storev1.ListResponse:
		k := keys(r.GetKeys())
		return &storev1.ListResponse{Keys: k}, len(k) > 0
	case *storev1.ListPrefixResponse:
		k := keys(r.GetKeys())
		return &storev1.ListPrefixResponse{Keys: k}, len(k) > 0
	case *storev1.ListDirResponse:
		out := &storev1.ListDirResponse{Keys: keys(r.GetKeys())}
		for _, pf := range r.GetPrefixes() {
			if pol.MaySeeUnder(p, strings.TrimSuffix(pf, "/")) {
				out.Prefixes = append(out.Prefixes, pf)
			}
		}
		return out, len(out.Keys)+len(out.Prefixes) > 0
	case *gatewayv1.ListChildrenResponse:
		out := &gatewayv1.ListChildrenResponse{}
		for _, n := range r.GetNodes() {
			if readable(n.GetPath()) {
				out.Nodes = append(out.Nodes, n)
			}
		}
		return out, len(out.Nodes) > 0
	}
	return m, true
}
