package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/authz"
	"github.com/zarrgate/zarrgate/storesvc"
)

// consolidated serves the virtual consolidated metadata of the group at
// key's directory: for <group>/zarr.json?consolidated the group's zarr.json
// with "consolidated_metadata" (Zarr v3, as zarr-python 3 writes it), for
// <group>/.zmetadata?consolidated (and for a .zmetadata the store lacks)
// the Zarr v2 .zmetadata document. Nodes the caller may not read are left
// out; more than MaxNodes nodes, or documents adding up to more than
// MaxConsolidatedBytes, are refused.
func (s *Server) consolidated(w http.ResponseWriter, r *http.Request, p auth.Principal, key string) {
	if err := storesvc.ValidateKey(key); err != nil {
		writeError(w, r, err)
		return
	}
	dir, base := "", key
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		dir, base = key[:i], key[i+1:]
	}
	var (
		doc any
		err error
	)
	switch base {
	case "zarr.json":
		doc, err = s.consolidatedV3(r, p, dir)
	case ".zmetadata":
		doc, err = s.consolidatedV2(r, p, dir)
	default:
		err = errs.New(errs.InvalidArgument, "?consolidated is served for a group's zarr.json (Zarr v3) or .zmetadata (Zarr v2), not %q", base)
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	if s.opts.CacheControl != "" {
		w.Header().Set("Cache-Control", s.opts.CacheControl)
	}
	writeJSON(w, r, doc)
}

// nodeDocs reads the documents named in names under the group at dir
// (its own included), keyed by their path relative to the group.
func (s *Server) nodeDocs(r *http.Request, p auth.Principal, dir string, names map[string]bool) (map[string]json.RawMessage, error) {
	ctx := r.Context()
	if err := s.check(ctx, p, authz.Read, dir, "GET consolidated"); err != nil {
		return nil, err
	}
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	pol := s.policy()
	var keys []string
	scanned := 0
	for k, err := range s.store.ListPrefix(ctx, prefix) {
		if err != nil {
			return nil, err
		}
		if scanned++; scanned > s.opts.MaxListEntries {
			return nil, errs.New(errs.ResourceExhausted, "consolidated metadata of %q: more than %d keys to look through; read the nodes' documents one by one", dir, s.opts.MaxListEntries)
		}
		if !names[k[strings.LastIndexByte(k, '/')+1:]] {
			continue
		}
		if pol != nil && !pol.Allowed(p, authz.Read, authz.ReadPath(k)) {
			continue
		}
		if len(keys) >= s.opts.MaxNodes*len(names) {
			return nil, errs.New(errs.ResourceExhausted, "consolidated metadata of %q: more than %d nodes; read the nodes' documents one by one", dir, s.opts.MaxNodes)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	docs := make(map[string]json.RawMessage, len(keys))
	var total int64
	for _, k := range keys {
		b, _, err := storesvc.ReadAll(ctx, s.store, k)
		if errs.CodeOf(err) == errs.CodeNotFound {
			continue // erased meanwhile
		}
		if err != nil {
			return nil, err
		}
		if total += int64(len(b)); total > s.opts.MaxConsolidatedBytes {
			return nil, errs.New(errs.ResourceExhausted, "consolidated metadata of %q: more than %d bytes of documents; read the nodes' documents one by one", dir, s.opts.MaxConsolidatedBytes)
		}
		if !json.Valid(b) {
			continue // not JSON: no reader could use it either
		}
		docs[strings.TrimPrefix(k, prefix)] = b
	}
	return docs, nil
}

func (s *Server) consolidatedV3(r *http.Request, p auth.Principal, dir string) (any, error) {
	docs, err := s.nodeDocs(r, p, dir, map[string]bool{"zarr.json": true})
	if err != nil {
		return nil, err
	}
	own, ok := docs["zarr.json"]
	if !ok {
		return nil, errs.New(errs.NotFound, "no group at %q (no zarr.json)", dir)
	}
	var group map[string]json.RawMessage
	if err := json.Unmarshal(own, &group); err != nil {
		return nil, errs.New(errs.FailedPrecondition, "%q/zarr.json is not a JSON object", dir)
	}
	var nodeType string
	json.Unmarshal(group["node_type"], &nodeType)
	if nodeType != "group" {
		return nil, errs.New(errs.InvalidArgument, "%q is not a group: consolidated metadata describes a group's nodes", dir)
	}
	meta := map[string]json.RawMessage{}
	for rel, b := range docs {
		if rel == "zarr.json" {
			continue
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		// A child group's own consolidated metadata would repeat what
		// the flat map already holds.
		delete(m, "consolidated_metadata")
		c, _ := json.Marshal(m)
		meta[strings.TrimSuffix(rel, "/zarr.json")] = c
	}
	cm, _ := json.Marshal(map[string]any{"kind": "inline", "must_understand": false, "metadata": meta})
	group["consolidated_metadata"] = cm
	return group, nil
}

func (s *Server) consolidatedV2(r *http.Request, p auth.Principal, dir string) (any, error) {
	docs, err := s.nodeDocs(r, p, dir, map[string]bool{".zgroup": true, ".zarray": true, ".zattrs": true})
	if err != nil {
		return nil, err
	}
	if _, ok := docs[".zgroup"]; !ok {
		return nil, errs.New(errs.NotFound, "no Zarr v2 group at %q (no .zgroup)", dir)
	}
	return map[string]any{"zarr_consolidated_format": 1, "metadata": docs}, nil
}
