// Package webui is the gateway's browser view: a page that shows the
// hierarchy as a tree, a node's metadata (shape, data type, chunks,
// shards, codecs, dimension names, fill value, attributes) and, for
// arrays, a 2-D slice as an image with a slider for every other dimension.
// The page is plain HTML, CSS and JavaScript embedded in the binary (no
// third-party code, nothing fetched from elsewhere: its Content Security
// Policy allows only its own origin).
//
// Mounted under /ui/ it serves
//
//	/ui/                the page (index.html, app.js, style.css)
//	/ui/api/tree        every group and array, depth first: {"nodes": [{"path", "kind"}], "truncated"}
//	/ui/api/node?path=  one node's metadata in JSON
//	/ui/api/slab/<path> the slab endpoint (package httpslab), for the images
//
// Every API request passes Options.Authorize with the node's path; the
// tree leaves out the nodes it refuses.
package webui

import (
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"strings"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/gateway/httpslab"
)

//go:embed assets
var assets embed.FS

// Options configure the handler. The zero value is usable.
type Options struct {
	// Authorize is consulted for every API request with the node's path
	// ("" for the root, when listing); nil allows everything. See
	// httpslab.Authorize.
	Authorize httpslab.Authorize
	// MaxNodes bounds the tree's listing. Default 10000.
	MaxNodes int
	// Slab configures the images' slab endpoint; its Authorize is
	// replaced by the one above.
	Slab httpslab.Options
}

// Handler returns the browser view over g. Mount it with
// http.StripPrefix("/ui", Handler(g, opts)) under "/ui/".
func Handler(g *gateway.Gateway, opts Options) http.Handler {
	if opts.MaxNodes <= 0 {
		opts.MaxNodes = 10000
	}
	opts.Slab.Authorize = opts.Authorize
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	h := &handler{g: g, opts: opts}
	mux := http.NewServeMux()
	mux.Handle("/api/slab/", http.StripPrefix("/api/slab", httpslab.Handler(g, opts.Slab)))
	mux.HandleFunc("/api/tree", h.tree)
	mux.HandleFunc("/api/node", h.node)
	mux.Handle("/api/", http.NotFoundHandler())
	files := http.FileServerFS(static)
	mux.Handle("/", files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" {
			// "/ui" without its slash: the page's relative URLs need it.
			http.Redirect(w, r, "ui/", http.StatusMovedPermanently)
			return
		}
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		if !strings.HasPrefix(r.URL.Path, "/api/") && r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the page serves GET and HEAD", http.StatusMethodNotAllowed)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// Public reports whether r, for a path under /ui/, asks for one of the
// page's own files (GET or HEAD outside /ui/api/): they hold no data and
// may be served without authentication (httpapi.Server.MountPublic).
func Public(r *http.Request) bool {
	p := r.URL.Path
	if strings.Contains(p, "..") || strings.Contains(p, "//") || strings.Contains(p, "/./") {
		return false // not clean: authenticated like the rest
	}
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		strings.HasPrefix(p, "/ui/") && !strings.HasPrefix(p, "/ui/api/")
}

type handler struct {
	g    *gateway.Gateway
	opts Options
}

// treeNode is one entry of /api/tree.
type treeNode struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
}

var errEnough = errors.New("enough nodes")

func (h *handler) tree(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	// No check of the root itself: a caller who may read only some
	// prefixes sees those (the rest is left out, each refusal audited),
	// and the walk is bounded in nodes visited, not only in nodes shown.
	nodes := []treeNode{}
	truncated := false
	visited := 0
	err := h.g.Children(r.Context(), "", true, func(n *gateway.Node) error {
		if visited++; visited > 8*h.opts.MaxNodes {
			truncated = true
			return errEnough
		}
		if h.authorize(r, n.Path) != nil {
			return nil
		}
		if len(nodes) == h.opts.MaxNodes {
			truncated = true
			return errEnough
		}
		nodes = append(nodes, treeNode{Path: n.Path, Kind: kindName(n)})
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		httpslab.WriteError(w, err)
		return
	}
	writeJSON(w, map[string]any{"nodes": nodes, "truncated": truncated})
}

// nodeInfo is /api/node's answer.
type nodeInfo struct {
	Path           string          `json:"path"`
	Kind           string          `json:"kind"`
	Format         string          `json:"format"`
	Shape          []int64         `json:"shape,omitempty"`
	DataType       string          `json:"data_type,omitempty"`
	ChunkShape     []int64         `json:"chunk_shape,omitempty"`
	ShardShape     []int64         `json:"shard_shape,omitempty"`
	Codecs         json.RawMessage `json:"codecs,omitempty"`
	DimensionNames []string        `json:"dimension_names,omitempty"`
	FillValue      json.RawMessage `json:"fill_value,omitempty"`
	Attributes     json.RawMessage `json:"attributes"`
}

func (h *handler) node(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	path := strings.Trim(r.URL.Query().Get("path"), "/")
	if err := h.authorize(r, path); err != nil {
		httpslab.WriteError(w, err)
		return
	}
	n, err := h.g.GetNode(r.Context(), path)
	if err != nil {
		httpslab.WriteError(w, err)
		return
	}
	info := nodeInfo{Path: n.Path, Kind: kindName(n), Format: n.Format.String(), Attributes: n.Attributes()}
	if len(info.Attributes) == 0 {
		info.Attributes = json.RawMessage("{}")
	}
	if n.Array != nil {
		d, err := gateway.DescribeArray(n.Array)
		if err != nil {
			httpslab.WriteError(w, errs.Wrap(errs.Internal, err, "describing %q", path))
			return
		}
		info.Shape, info.DataType, info.ChunkShape, info.ShardShape = d.Shape, d.DataType, d.ChunkShape, d.ShardShape
		info.Codecs, info.DimensionNames, info.FillValue = d.Codecs, d.DimensionNames, d.FillValue
		if info.Shape == nil {
			info.Shape = []int64{}
		}
	}
	writeJSON(w, info)
}

func (h *handler) authorize(r *http.Request, path string) error {
	if h.opts.Authorize == nil {
		return nil
	}
	return h.opts.Authorize(r, path)
}

func kindName(n *gateway.Node) string {
	if n.Kind() == gateway.KindArray {
		return "array"
	}
	return "group"
}

func getOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "the API serves GET and HEAD", http.StatusMethodNotAllowed)
	return false
}

func writeJSON(w http.ResponseWriter, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		httpslab.WriteError(w, errs.Wrap(errs.Internal, err, "encoding JSON"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(body)
}
