package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/authz"
	"github.com/zarrgate/zarrgate/internal/bufpool"
	"github.com/zarrgate/zarrgate/storesvc"
)

// serveStore serves /zarr/<key>.
func (s *Server) serveStore(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.URL.Path, Prefix)
	q := r.URL.Query()
	p, _ := auth.FromContext(r.Context())
	switch {
	case q.Has("list") || q.Has("list_dir"):
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			s.notAllowed(w, r, "GET, HEAD")
			return
		}
		s.list(w, r, p, key, q.Has("list_dir"))
		return
	case q.Has("consolidated"):
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			s.notAllowed(w, r, "GET, HEAD")
			return
		}
		s.consolidated(w, r, p, key)
		return
	}
	if err := storesvc.ValidateKey(key); err != nil {
		writeError(w, r, err)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.get(w, r, p, key)
	case http.MethodPut:
		if !s.writable(w, r) {
			return
		}
		s.put(w, r, p, key)
	case http.MethodDelete:
		if !s.writable(w, r) {
			return
		}
		s.erase(w, r, p, key)
	case http.MethodOptions:
		w.Header().Set("Allow", s.allow())
		w.WriteHeader(http.StatusNoContent)
	default:
		s.notAllowed(w, r, s.allow())
	}
}

func (s *Server) allow() string {
	if s.opts.Writes && s.store.Capabilities().Writable {
		return "GET, HEAD, PUT, DELETE, OPTIONS"
	}
	return "GET, HEAD, OPTIONS"
}

func (s *Server) notAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	msg := r.Method + " is not allowed here (allowed: " + allow + ")\n"
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusMethodNotAllowed)
	io.WriteString(w, msg)
}

func (s *Server) writable(w http.ResponseWriter, r *http.Request) bool {
	if s.opts.Writes && s.store.Capabilities().Writable {
		return true
	}
	s.notAllowed(w, r, s.allow())
	return false
}

// get serves GET and HEAD of a key, whole or a range.
func (s *Server) get(w http.ResponseWriter, r *http.Request, p auth.Principal, key string) {
	ctx := r.Context()
	if err := s.check(ctx, p, authz.Read, authz.ReadPath(key), "GET"); err != nil {
		writeError(w, r, err)
		return
	}
	rng, ranged, err := parseRange(r.Header.Get("Range"))
	if err != nil {
		s.unsatisfiable(w, r, key)
		return
	}
	if ir := r.Header.Get("If-Range"); ranged && ir != "" {
		// Only entity tags are validators here (no Last-Modified): a
		// date, or a tag that no longer matches, gets the whole value.
		obj, err := s.store.Get(ctx, key, storesvc.Bounded(0, 0))
		if err != nil {
			writeError(w, r, err)
			return
		}
		obj.Close()
		if !strings.HasPrefix(ir, `"`) || ir != etag(obj.Generation) {
			ranged, rng = false, httpRange{}
		}
	}
	if s.opts.ConsolidateGroups && !ranged && strings.HasSuffix("/"+key, "/zarr.json") {
		if s.consolidatedGroup(w, r, p, key) {
			return
		}
	}
	obj, err := s.open(r, key, rng)
	if err != nil {
		if errs.CodeOf(err) == errs.CodeNotFound && strings.HasSuffix("/"+key, "/.zmetadata") {
			// Zarr v2 readers look for .zmetadata: a group without one
			// gets the virtual document.
			s.consolidated(w, r, p, key)
			return
		}
		if errs.CodeOf(err) == errs.CodeOutOfRange {
			s.unsatisfiable(w, r, key)
			return
		}
		writeError(w, r, err)
		return
	}
	defer obj.Close()
	h := w.Header()
	tag := etag(obj.Generation)
	if tag != "" {
		h.Set("ETag", tag)
	}
	if s.opts.CacheControl != "" {
		h.Set("Cache-Control", s.opts.CacheControl)
	}
	h.Set("Accept-Ranges", "bytes")
	if inm := r.Header.Get("If-None-Match"); inm != "" && matchesAny(inm, tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", contentType(key))
	h.Set("Content-Length", strconv.FormatInt(obj.Length, 10))
	status := http.StatusOK
	if ranged {
		status = http.StatusPartialContent
		h.Set("Content-Range", "bytes "+strconv.FormatInt(obj.Offset, 10)+"-"+strconv.FormatInt(obj.Offset+obj.Length-1, 10)+"/"+strconv.FormatInt(obj.Size, 10))
	}
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	if err := copyValue(ctx, w, obj); err != nil && ctx.Err() == nil {
		// The status is sent: all that is left is to cut the response
		// short, which the client sees as a short body.
		s.logger.Warn("http: reading a value failed mid-response", "key", key, "error", err)
		panic(http.ErrAbortHandler)
	}
}

// copyStep bounds the buffer of one response (from the buffer pool): a
// value streams through it, whatever its size.
const copyStep = 1 << 20

// WriteStepTimeout bounds how long the client may take to take one step
// (up to 1 MiB) of a value: a large value streams for as long as the client
// keeps reading, but a client that stops reading is cut off.
const WriteStepTimeout = time.Minute

// copyValue streams obj's Length bytes to w through a pooled buffer no
// larger than the value, checking ctx between steps and giving each step
// WriteStepTimeout.
func copyValue(ctx context.Context, w http.ResponseWriter, obj *storesvc.Object) error {
	rc := http.NewResponseController(w)
	n := obj.Length
	if n == 0 {
		return nil
	}
	buf := bufpool.Get(int(min(n, copyStep)))
	defer bufpool.Put(buf)
	for n > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := io.ReadFull(obj, buf[:min(n, int64(len(buf)))])
		if m > 0 {
			rc.SetWriteDeadline(time.Now().Add(WriteStepTimeout)) // not every ResponseWriter can: then none
			if _, werr := w.Write(buf[:m]); werr != nil {
				return werr
			}
			n -= int64(m)
		}
		if err != nil && n > 0 {
			return err
		}
	}
	return nil
}

// open opens the range of key; a bounded range reaching past the end is
// served up to the end (RFC 9110 §14.1.2), a suffix longer than the value
// is the whole value.
func (s *Server) open(r *http.Request, key string, rng httpRange) (*storesvc.Object, error) {
	ctx := r.Context()
	var br storesvc.ByteRange
	switch rng.kind {
	case rangeBounded:
		br = storesvc.Bounded(rng.first, rng.last-rng.first+1)
	case rangeFrom:
		br = storesvc.FromOffset(rng.first)
	case rangeSuffix:
		br = storesvc.Suffix(rng.n)
	}
	obj, err := s.store.Get(ctx, key, br)
	if err == nil || errs.CodeOf(err) != errs.CodeOutOfRange {
		if err == nil && rng.kind != rangeNone && obj.Length == 0 {
			// bytes=N- with N the size (or an empty value): nothing to send.
			obj.Close()
			return nil, errs.New(errs.OutOfRange, "range past the end")
		}
		return obj, err
	}
	switch rng.kind {
	case rangeBounded:
		obj, err = s.store.Get(ctx, key, storesvc.FromOffset(rng.first))
	case rangeSuffix:
		obj, err = s.store.Get(ctx, key, storesvc.ByteRange{})
	default:
		return nil, err
	}
	if err == nil && obj.Length == 0 {
		obj.Close()
		return nil, errs.New(errs.OutOfRange, "range past the end")
	}
	return obj, err
}

// unsatisfiable answers 416 with the value's size.
func (s *Server) unsatisfiable(w http.ResponseWriter, r *http.Request, key string) {
	obj, err := s.store.Get(r.Context(), key, storesvc.ByteRange{})
	if err != nil {
		writeError(w, r, err)
		return
	}
	obj.Close()
	w.Header().Set("Content-Range", "bytes */"+strconv.FormatInt(obj.Size, 10))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
	if r.Method != http.MethodHead {
		io.WriteString(w, "range not satisfiable: the value has "+strconv.FormatInt(obj.Size, 10)+" bytes\n")
	}
}

// contentType is the media type of a key: JSON for metadata documents,
// bytes otherwise.
func contentType(key string) string {
	base := key[strings.LastIndexByte(key, '/')+1:]
	switch base {
	case "zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata":
		return "application/json"
	}
	return "application/octet-stream"
}

// put stores the body under key; If-Match and If-None-Match: * make it
// conditional.
func (s *Server) put(w http.ResponseWriter, r *http.Request, p auth.Principal, key string) {
	ctx := r.Context()
	if err := s.check(ctx, p, authz.Write, key, "PUT"); err != nil {
		writeError(w, r, err)
		return
	}
	cond, err := condition(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if r.ContentLength > s.opts.MaxBodyBytes {
		writeError(w, r, errs.New(errs.InvalidArgument, "body of %d bytes is larger than the %d bytes a PUT may carry", r.ContentLength, s.opts.MaxBodyBytes))
		return
	}
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(BodyReadTimeout))
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
	gen, err := s.store.Set(ctx, key, body, cond)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		err = errs.New(errs.InvalidArgument, "body is larger than the %d bytes a PUT may carry", s.opts.MaxBodyBytes)
	}
	s.audit(ctx, p, "PUT", key, authz.Write, false, err)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if tag := etag(gen); tag != "" {
		w.Header().Set("ETag", tag)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) erase(w http.ResponseWriter, r *http.Request, p auth.Principal, key string) {
	ctx := r.Context()
	if err := s.check(ctx, p, authz.Delete, key, "DELETE"); err != nil {
		writeError(w, r, err)
		return
	}
	cond, err := condition(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if cond.IfAbsent {
		writeError(w, r, errs.New(errs.InvalidArgument, "DELETE with If-None-Match: * would never delete anything"))
		return
	}
	err = s.store.Erase(ctx, key, cond)
	s.audit(ctx, p, "DELETE", key, authz.Delete, false, err)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// condition reads If-Match (one entity tag) and If-None-Match (only "*":
// create) of a write.
func condition(r *http.Request) (storesvc.Condition, error) {
	var c storesvc.Condition
	if im := r.Header.Get("If-Match"); im != "" {
		if strings.Contains(im, ",") || strings.TrimSpace(im) == "*" {
			return c, errs.New(errs.InvalidArgument, "If-Match: want exactly one entity tag, as returned by GET or PUT")
		}
		g, err := generationOf(im)
		if err != nil {
			return c, err
		}
		c.IfGenerationMatch = g
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" {
		if strings.TrimSpace(inm) != "*" {
			return c, errs.New(errs.InvalidArgument, "If-None-Match on a write: only * (create, never overwrite) is supported")
		}
		if c.IfGenerationMatch != "" {
			return c, errs.New(errs.InvalidArgument, "If-Match and If-None-Match: * together can never both hold")
		}
		c.IfAbsent = true
	}
	return c, nil
}

// listing is the JSON of ?list and ?list_dir.
type listing struct {
	Prefix   string   `json:"prefix"`
	Keys     []string `json:"keys"`
	Prefixes []string `json:"prefixes,omitempty"`
}

// list answers ?list (every key under the prefix) or ?list_dir (the keys
// and child prefixes directly under it), sorted, filtered to what the
// caller may read, and refused when longer than MaxListEntries.
func (s *Server) list(w http.ResponseWriter, r *http.Request, p auth.Principal, path string, dir bool) {
	ctx := r.Context()
	prefix := path
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if err := storesvc.ValidatePrefix(prefix); err != nil {
		writeError(w, r, err)
		return
	}
	pol := s.policy()
	node := strings.TrimSuffix(prefix, "/")
	if pol != nil && !pol.MaySeeUnder(p, node) {
		name := node
		if name == "" {
			name = "the store root"
		}
		err := errs.New(errs.PermissionDenied, "list: %s has no %q permission on %s or below it", authz.PrincipalString(p), "read", name)
		s.audit(ctx, p, "list", node, authz.Read, true, err)
		writeError(w, r, err)
		return
	}
	readable := func(k string) bool { return pol == nil || pol.Allowed(p, authz.Read, authz.ReadPath(k)) }
	out := listing{Prefix: prefix, Keys: []string{}}
	n := 0
	tooMany := func() {
		writeError(w, r, errs.New(errs.ResourceExhausted, "listing of %q has more than %d entries: list a narrower prefix, or one level with ?list_dir", prefix, s.opts.MaxListEntries))
	}
	if dir {
		dl, ok := s.store.(storesvc.DirLister)
		if !ok {
			writeError(w, r, errs.New(errs.Unimplemented, "this store cannot list one level (?list_dir); use ?list"))
			return
		}
		for e, err := range dl.ListDir(ctx, prefix) {
			if err != nil {
				writeError(w, r, err)
				return
			}
			if n++; n > s.opts.MaxListEntries {
				tooMany()
				return
			}
			if e.IsPrefix {
				if pol == nil || pol.MaySeeUnder(p, strings.TrimSuffix(e.Path, "/")) {
					out.Prefixes = append(out.Prefixes, e.Path)
				}
			} else if readable(e.Path) {
				out.Keys = append(out.Keys, e.Path)
			}
		}
	} else {
		for k, err := range s.store.ListPrefix(ctx, prefix) {
			if err != nil {
				writeError(w, r, err)
				return
			}
			if n++; n > s.opts.MaxListEntries {
				tooMany()
				return
			}
			if readable(k) {
				out.Keys = append(out.Keys, k)
			}
		}
	}
	slices.Sort(out.Keys)
	slices.Sort(out.Prefixes)
	writeJSON(w, r, out)
}

func writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, r, errs.Wrap(errs.Internal, err, "encoding JSON"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(b)
	}
}

// consolidatedGroup answers a GET of a group's zarr.json with its
// consolidated metadata (ConsolidateGroups) and reports true; false when
// key is not a group's document or the group is too large to
// consolidate: then the stored document is served.
func (s *Server) consolidatedGroup(w http.ResponseWriter, r *http.Request, p auth.Principal, key string) bool {
	// Only groups: an array's document is served as stored, without
	// listing its chunks.
	obj, err := s.store.Get(r.Context(), key, storesvc.ByteRange{})
	if err != nil {
		return false // served (or refused) as any key
	}
	small := obj.Size <= s.opts.MaxConsolidatedBytes
	obj.Close()
	if !small {
		return false
	}
	b, _, err := storesvc.ReadAll(r.Context(), s.store, key)
	var head struct {
		NodeType string `json:"node_type"`
	}
	if err != nil || json.Unmarshal(b, &head) != nil || head.NodeType != "group" {
		return false
	}
	dir := strings.TrimSuffix(strings.TrimSuffix(key, "zarr.json"), "/")
	doc, err := s.consolidatedV3(r, p, dir)
	switch errs.CodeOf(err) {
	case errs.CodeOK:
		if s.opts.CacheControl != "" {
			w.Header().Set("Cache-Control", s.opts.CacheControl)
		}
		writeJSON(w, r, doc)
		return true
	case errs.CodeInvalidArgument, errs.CodeResourceExhausted, errs.CodeFailedPrecondition:
		return false // an array, or too large: the stored document
	}
	writeError(w, r, err)
	return true
}
