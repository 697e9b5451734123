package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/authz"
	"github.com/zarrgate/zarrgate/internal/httpapi"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/memory"
)

const value = "0123456789" // the value of key "a/c/0", 10 bytes

func newServer(t *testing.T, opts httpapi.Options) (*httptest.Server, *storesvc.Portable) {
	t.Helper()
	st := storesvc.Wrap(memory.New())
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	for k, v := range map[string]string{
		"a/c/0":        value,
		"a/zarr.json":  `{"zarr_format":3,"node_type":"array","shape":[10],"data_type":"uint8","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[10]}},"chunk_key_encoding":{"name":"default"},"fill_value":0,"codecs":[{"name":"bytes"}]}`,
		"zarr.json":    `{"zarr_format":3,"node_type":"group","attributes":{"x":1}}`,
		"g/zarr.json":  `{"zarr_format":3,"node_type":"group"}`,
		"empty":        "",
		"v2/.zgroup":   `{"zarr_format":2}`,
		"v2/b/.zarray": `{"zarr_format":2,"shape":[1]}`,
		"v2/b/.zattrs": `{"u":"m"}`,
	} {
		if _, err := st.Set(ctx, k, strings.NewReader(v), storesvc.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(httpapi.New(st, opts))
	t.Cleanup(srv.Close)
	return srv, st
}

func do(t *testing.T, method, url string, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestRange is the table of Range semantics: every form, its edges and
// its errors, on a 10-byte value.
func TestRange(t *testing.T) {
	srv, _ := newServer(t, httpapi.Options{})
	for _, c := range []struct {
		rng          string
		status       int
		body         string
		contentRange string
	}{
		{"", 200, value, ""},
		{"bytes=0-0", 206, "0", "bytes 0-0/10"},
		{"bytes=2-5", 206, "2345", "bytes 2-5/10"},
		{"bytes=0-9", 206, value, "bytes 0-9/10"},
		{"bytes=9-9", 206, "9", "bytes 9-9/10"},
		{"bytes=5-100", 206, "56789", "bytes 5-9/10"}, // last past the end: up to the end
		{"bytes=0-999999999999999999", 206, value, "bytes 0-9/10"},
		{"bytes=3-", 206, "3456789", "bytes 3-9/10"},
		{"bytes=0-", 206, value, "bytes 0-9/10"},
		{"bytes=9-", 206, "9", "bytes 9-9/10"},
		{"bytes=-3", 206, "789", "bytes 7-9/10"},
		{"bytes=-10", 206, value, "bytes 0-9/10"},
		{"bytes=-11", 206, value, "bytes 0-9/10"}, // suffix longer than the value: all of it
		{"bytes=10-", 416, "", "bytes */10"},
		{"bytes=10-20", 416, "", "bytes */10"},
		{"bytes=11-", 416, "", "bytes */10"},
		{"bytes=-0", 416, "", "bytes */10"},
		// Ignored (RFC 9110 §14.2): the whole value.
		{"bytes=5-2", 200, value, ""},
		{"bytes=1-2,4-5", 200, value, ""},
		{"items=1-2", 200, value, ""},
		{"bytes=a-b", 200, value, ""},
		{"bytes=-", 200, value, ""},
		{"bytes=+1-2", 200, value, ""},
		{"bytes=99999999999999999999-", 200, value, ""},
	} {
		t.Run(c.rng, func(t *testing.T) {
			resp, body := do(t, "GET", srv.URL+"/zarr/a/c/0", map[string]string{"Range": c.rng}, "")
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, c.status, body)
			}
			if got := resp.Header.Get("Content-Range"); got != c.contentRange {
				t.Errorf("Content-Range %q, want %q", got, c.contentRange)
			}
			if c.status != 416 && body != c.body {
				t.Errorf("body %q, want %q", body, c.body)
			}
			if c.status != 416 && resp.Header.Get("Accept-Ranges") != "bytes" {
				t.Errorf("no Accept-Ranges: bytes")
			}
			// HEAD: the same status and headers, no body.
			hresp, hbody := do(t, "HEAD", srv.URL+"/zarr/a/c/0", map[string]string{"Range": c.rng}, "")
			if hresp.StatusCode != c.status || hbody != "" || hresp.Header.Get("Content-Range") != c.contentRange {
				t.Errorf("HEAD: status %d body %q Content-Range %q", hresp.StatusCode, hbody, hresp.Header.Get("Content-Range"))
			}
			if c.status != 416 && hresp.ContentLength != int64(len(c.body)) {
				t.Errorf("HEAD: Content-Length %d, want %d", hresp.ContentLength, len(c.body))
			}
		})
	}
	t.Run("empty value", func(t *testing.T) {
		if resp, body := do(t, "GET", srv.URL+"/zarr/empty", nil, ""); resp.StatusCode != 200 || body != "" {
			t.Errorf("GET empty: %d %q", resp.StatusCode, body)
		}
		if resp, _ := do(t, "GET", srv.URL+"/zarr/empty", map[string]string{"Range": "bytes=0-"}, ""); resp.StatusCode != 416 || resp.Header.Get("Content-Range") != "bytes */0" {
			t.Errorf("GET empty bytes=0-: %d %q", resp.StatusCode, resp.Header.Get("Content-Range"))
		}
	})
	t.Run("missing key with a range", func(t *testing.T) {
		for _, rng := range []string{"bytes=0-1", "bytes=-0", "bytes=5-"} {
			if resp, _ := do(t, "GET", srv.URL+"/zarr/nope", map[string]string{"Range": rng}, ""); resp.StatusCode != 404 {
				t.Errorf("%s: status %d, want 404", rng, resp.StatusCode)
			}
		}
	})
}

func TestKeysAndErrors(t *testing.T) {
	srv, _ := newServer(t, httpapi.Options{})
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/zarr/nope", 404},
		{"HEAD", "/zarr/nope", 404},
		{"GET", "/zarr/a", 404},
		{"GET", "/zarr/", 400},
		{"GET", "/zarr/a/", 400},
		{"GET", "/zarr//a", 400},
		{"GET", "/zarr/a/%2E%2E/zarr.json", 400},
		{"GET", "/zarr/a/./c/0", 400},
		{"GET", "/zarr/a%00b", 400},
		{"GET", "/zarr/.zarrgate-tmp-x", 400},
		{"GET", "/zarr/" + strings.Repeat("k/", 600) + "k", 400},
		{"GET", "/other", 404},
		{"PUT", "/zarr/a/c/1", 405}, // writes off
		{"DELETE", "/zarr/a/c/0", 405},
		{"POST", "/zarr/a/c/0", 405},
		{"GET", "/zarr/a/c/0?consolidated", 400},
	} {
		resp, body := do(t, c.method, srv.URL+c.path, nil, "")
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: status %d, want %d (%s)", c.method, c.path, resp.StatusCode, c.status, body)
		}
	}
}

func TestConditional(t *testing.T) {
	srv, _ := newServer(t, httpapi.Options{CacheControl: "max-age=60", Writes: true})
	resp, _ := do(t, "GET", srv.URL+"/zarr/a/c/0", nil, "")
	tag := resp.Header.Get("ETag")
	if !strings.HasPrefix(tag, `"`) || len(tag) < 3 {
		t.Fatalf("ETag %q", tag)
	}
	if resp.Header.Get("Cache-Control") != "max-age=60" {
		t.Errorf("Cache-Control %q", resp.Header.Get("Cache-Control"))
	}
	for _, inm := range []string{tag, "W/" + tag, `"other", ` + tag, "*"} {
		if r, body := do(t, "GET", srv.URL+"/zarr/a/c/0", map[string]string{"If-None-Match": inm}, ""); r.StatusCode != 304 || body != "" || r.Header.Get("ETag") != tag {
			t.Errorf("If-None-Match %s: %d %q ETag %q", inm, r.StatusCode, body, r.Header.Get("ETag"))
		}
	}
	if r, body := do(t, "GET", srv.URL+"/zarr/a/c/0", map[string]string{"If-None-Match": `"other"`}, ""); r.StatusCode != 200 || body != value {
		t.Errorf("If-None-Match other: %d %q", r.StatusCode, body)
	}
	// If-Range: a matching tag keeps the range, another gets everything.
	if r, body := do(t, "GET", srv.URL+"/zarr/a/c/0", map[string]string{"Range": "bytes=0-1", "If-Range": tag}, ""); r.StatusCode != 206 || body != "01" {
		t.Errorf("If-Range match: %d %q", r.StatusCode, body)
	}
	if r, body := do(t, "GET", srv.URL+"/zarr/a/c/0", map[string]string{"Range": "bytes=0-1", "If-Range": `"old"`}, ""); r.StatusCode != 200 || body != value {
		t.Errorf("If-Range stale: %d %q", r.StatusCode, body)
	}
	// Writes: If-Match with a stale tag fails (412), with the current one
	// succeeds and changes the tag; If-None-Match: * creates only.
	if r, _ := do(t, "PUT", srv.URL+"/zarr/a/c/0", map[string]string{"If-Match": `"stale"`}, "new"); r.StatusCode != 412 {
		t.Errorf("PUT If-Match stale: %d", r.StatusCode)
	}
	r, _ := do(t, "PUT", srv.URL+"/zarr/a/c/0", map[string]string{"If-Match": tag}, "new")
	newTag := r.Header.Get("ETag")
	if r.StatusCode != 204 || newTag == "" || newTag == tag {
		t.Fatalf("PUT If-Match current: %d ETag %q (old %q)", r.StatusCode, newTag, tag)
	}
	if r, body := do(t, "GET", srv.URL+"/zarr/a/c/0", nil, ""); body != "new" || r.Header.Get("ETag") != newTag {
		t.Errorf("after PUT: %q ETag %q, want %q", body, r.Header.Get("ETag"), newTag)
	}
	if r, _ := do(t, "PUT", srv.URL+"/zarr/a/c/0", map[string]string{"If-None-Match": "*"}, "x"); r.StatusCode != 412 {
		t.Errorf("PUT If-None-Match * on an existing key: %d", r.StatusCode)
	}
	if r, _ := do(t, "PUT", srv.URL+"/zarr/a/c/9", map[string]string{"If-None-Match": "*"}, "x"); r.StatusCode != 204 {
		t.Errorf("PUT If-None-Match * on a new key: %d", r.StatusCode)
	}
	for _, h := range []map[string]string{{"If-Match": "*"}, {"If-Match": `"a", "b"`}, {"If-Match": "noquotes"}, {"If-None-Match": `"x"`}} {
		if r, _ := do(t, "PUT", srv.URL+"/zarr/a/c/0", h, "x"); r.StatusCode != 400 {
			t.Errorf("PUT %v: %d, want 400", h, r.StatusCode)
		}
	}
	if r, _ := do(t, "DELETE", srv.URL+"/zarr/a/c/0", map[string]string{"If-Match": tag}, ""); r.StatusCode != 412 {
		t.Errorf("DELETE with the old tag: %d", r.StatusCode)
	}
	if r, _ := do(t, "DELETE", srv.URL+"/zarr/a/c/0", map[string]string{"If-Match": newTag}, ""); r.StatusCode != 204 {
		t.Errorf("DELETE with the current tag: %d", r.StatusCode)
	}
	if r, _ := do(t, "GET", srv.URL+"/zarr/a/c/0", nil, ""); r.StatusCode != 404 {
		t.Errorf("after DELETE: %d", r.StatusCode)
	}
}

func TestPutBodyLimit(t *testing.T) {
	srv, _ := newServer(t, httpapi.Options{Writes: true, MaxBodyBytes: 8})
	if r, _ := do(t, "PUT", srv.URL+"/zarr/k", nil, "123456789"); r.StatusCode != 400 {
		t.Errorf("PUT of 9 bytes with a limit of 8: %d", r.StatusCode)
	}
	// Without Content-Length (chunked): refused while reading, nothing stored.
	req, _ := http.NewRequest("PUT", srv.URL+"/zarr/k", io.MultiReader(strings.NewReader("12345"), strings.NewReader("6789")))
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("chunked PUT over the limit: %d", resp.StatusCode)
	}
	if r, _ := do(t, "GET", srv.URL+"/zarr/k", nil, ""); r.StatusCode != 404 {
		t.Errorf("a refused PUT stored something: %d", r.StatusCode)
	}
	if r, _ := do(t, "PUT", srv.URL+"/zarr/k", nil, "12345678"); r.StatusCode != 204 {
		t.Errorf("PUT at the limit: %d", r.StatusCode)
	}
}

func TestCORS(t *testing.T) {
	srv, _ := newServer(t, httpapi.Options{CORSOrigins: []string{"https://app.example"}})
	r, _ := do(t, "OPTIONS", srv.URL+"/zarr/a/c/0", map[string]string{"Origin": "https://app.example", "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "range"}, "")
	if r.StatusCode != 204 || r.Header.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(r.Header.Get("Access-Control-Allow-Headers"), "Range") || !strings.Contains(r.Header.Get("Access-Control-Allow-Methods"), "GET") ||
		strings.Contains(r.Header.Get("Access-Control-Allow-Methods"), "PUT") {
		t.Errorf("preflight: %d %v", r.StatusCode, r.Header)
	}
	r, _ = do(t, "GET", srv.URL+"/zarr/a/c/0", map[string]string{"Origin": "https://app.example", "Range": "bytes=0-1"}, "")
	if r.Header.Get("Access-Control-Allow-Origin") != "https://app.example" || !strings.Contains(r.Header.Get("Access-Control-Expose-Headers"), "Content-Range") {
		t.Errorf("GET from an allowed origin: %v", r.Header)
	}
	r, _ = do(t, "OPTIONS", srv.URL+"/zarr/a/c/0", map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"}, "")
	if r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from another origin allowed: %v", r.Header)
	}
	any, _ := newServer(t, httpapi.Options{CORSOrigins: []string{"*"}})
	r, _ = do(t, "GET", any.URL+"/zarr/a/c/0", map[string]string{"Origin": "https://x.example"}, "")
	if r.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("CORS *: %v", r.Header)
	}
	none, _ := newServer(t, httpapi.Options{})
	r, _ = do(t, "GET", none.URL+"/zarr/a/c/0", map[string]string{"Origin": "https://x.example"}, "")
	if r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS headers without --http-cors-origins: %v", r.Header)
	}
}

func TestList(t *testing.T) {
	srv, _ := newServer(t, httpapi.Options{})
	var l struct {
		Prefix   string
		Keys     []string
		Prefixes []string
	}
	r, body := do(t, "GET", srv.URL+"/zarr/a?list", nil, "")
	if r.StatusCode != 200 || json.Unmarshal([]byte(body), &l) != nil || strings.Join(l.Keys, ",") != "a/c/0,a/zarr.json" || l.Prefix != "a/" {
		t.Errorf("?list of a: %d %s", r.StatusCode, body)
	}
	l.Keys, l.Prefixes = nil, nil
	r, body = do(t, "GET", srv.URL+"/zarr/?list_dir", nil, "")
	if r.StatusCode != 200 || json.Unmarshal([]byte(body), &l) != nil || strings.Join(l.Keys, ",") != "empty,zarr.json" || strings.Join(l.Prefixes, ",") != "a/,g/,v2/" {
		t.Errorf("?list_dir of the root: %d %s", r.StatusCode, body)
	}
	if r, _ := do(t, "GET", srv.URL+"/zarr/a/../b?list", nil, ""); r.StatusCode != 400 {
		t.Errorf("?list of a bad prefix: %d", r.StatusCode)
	}
	small, _ := newServer(t, httpapi.Options{MaxListEntries: 3})
	if r, body := do(t, "GET", small.URL+"/zarr/?list", nil, ""); r.StatusCode != 429 || !strings.Contains(body, "narrower prefix") {
		t.Errorf("?list over the cap: %d %s", r.StatusCode, body)
	}
}

func TestConsolidated(t *testing.T) {
	srv, _ := newServer(t, httpapi.Options{})
	var doc struct {
		NodeType string         `json:"node_type"`
		Attrs    map[string]any `json:"attributes"`
		CM       struct {
			Kind     string                     `json:"kind"`
			Metadata map[string]json.RawMessage `json:"metadata"`
		} `json:"consolidated_metadata"`
	}
	r, body := do(t, "GET", srv.URL+"/zarr/zarr.json?consolidated", nil, "")
	if r.StatusCode != 200 || json.Unmarshal([]byte(body), &doc) != nil {
		t.Fatalf("v3: %d %s", r.StatusCode, body)
	}
	if doc.NodeType != "group" || doc.Attrs["x"] != 1.0 || doc.CM.Kind != "inline" || len(doc.CM.Metadata) != 2 || doc.CM.Metadata["a"] == nil || doc.CM.Metadata["g"] == nil {
		t.Errorf("v3 consolidated: %s", body)
	}
	var v2 struct {
		Format   int                        `json:"zarr_consolidated_format"`
		Metadata map[string]json.RawMessage `json:"metadata"`
	}
	// .zmetadata is not stored: the virtual one is served, at its usual key.
	r, body = do(t, "GET", srv.URL+"/zarr/v2/.zmetadata", nil, "")
	if r.StatusCode != 200 || json.Unmarshal([]byte(body), &v2) != nil || v2.Format != 1 || len(v2.Metadata) != 3 || string(v2.Metadata["b/.zattrs"]) != `{"u":"m"}` {
		t.Errorf("v2: %d %s", r.StatusCode, body)
	}
	if r, _ := do(t, "GET", srv.URL+"/zarr/a/zarr.json?consolidated", nil, ""); r.StatusCode != 400 {
		t.Errorf("consolidated of an array: %d", r.StatusCode)
	}
	if r, _ := do(t, "GET", srv.URL+"/zarr/nope/zarr.json?consolidated", nil, ""); r.StatusCode != 404 {
		t.Errorf("consolidated of nothing: %d", r.StatusCode)
	}
	if r, _ := do(t, "GET", srv.URL+"/zarr/a/.zmetadata", nil, ""); r.StatusCode != 404 {
		t.Errorf(".zmetadata of no v2 group: %d", r.StatusCode)
	}
	few, _ := newServer(t, httpapi.Options{MaxNodes: 1})
	if r, _ := do(t, "GET", few.URL+"/zarr/zarr.json?consolidated", nil, ""); r.StatusCode != 429 {
		t.Errorf("consolidated over the node cap: %d", r.StatusCode)
	}
}

// TestAuth: the bearer token decides who calls, the policy what on which
// path, as on the gRPC listener.
func TestAuth(t *testing.T) {
	toks, err := auth.ParseTokens(strings.NewReader("sha256:3c2af53df95747a2fe651f3fe20729bc5cfeab3bb28b3028402355409f177579 reader\nsha256:1311d386b28ba8273c4d6a25ef585753a6bfa70835fe1b73e55527227c0eb61b writer\n"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := authz.Parse([]byte(`
rules:
  - principals: [user:reader]
    prefixes: [a]
    permissions: [read]
  - principals: [user:writer]
    prefixes: [""]
    permissions: [read, write, delete]
`))
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := newServer(t, httpapi.Options{
		Writes:        true,
		Authenticator: &auth.Authenticator{Tokens: func() *auth.Tokens { return toks }},
		Policy:        func() *authz.Policy { return pol },
	})
	for _, c := range []struct {
		method, path, token string
		status              int
	}{
		{"GET", "/zarr/a/c/0", "", 401},
		{"GET", "/zarr/a/c/0", "bogus", 401},
		{"GET", "/zarr/a/c/0", "tok-reader", 200},
		{"GET", "/zarr/a/zarr.json", "tok-reader", 200},
		{"GET", "/zarr/zarr.json", "tok-reader", 403},
		{"GET", "/zarr/g/zarr.json", "tok-reader", 403},
		{"PUT", "/zarr/a/c/1", "tok-reader", 403},
		{"DELETE", "/zarr/a/c/0", "tok-reader", 403},
		{"GET", "/zarr/zarr.json?consolidated", "tok-reader", 403},
		{"GET", "/zarr/g?list", "tok-reader", 403},
		{"PUT", "/zarr/a/c/1", "tok-writer", 204},
		{"GET", "/zarr/zarr.json", "tok-writer", 200},
	} {
		h := map[string]string{}
		if c.token != "" {
			h["Authorization"] = "Bearer " + c.token
		}
		body := ""
		if c.method == "PUT" {
			body = "x"
		}
		r, msg := do(t, c.method, srv.URL+c.path, h, body)
		if r.StatusCode != c.status {
			t.Errorf("%s %s as %q: %d, want %d (%s)", c.method, c.path, c.token, r.StatusCode, c.status, msg)
		}
		if r.StatusCode == 401 && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("401 without WWW-Authenticate: %v", r.Header)
		}
	}
	// The root listing shows the reader only what it may read.
	r, body := do(t, "GET", srv.URL+"/zarr/?list", map[string]string{"Authorization": "Bearer tok-reader"}, "")
	if r.StatusCode != 200 || strings.Contains(body, "g/zarr.json") || strings.Contains(body, `"zarr.json"`) || !strings.Contains(body, "a/c/0") {
		t.Errorf("filtered listing: %d %s", r.StatusCode, body)
	}
}

func TestMount(t *testing.T) {
	st := storesvc.Wrap(memory.New())
	defer st.Close()
	s := httpapi.New(st, httpapi.Options{Authenticator: &auth.Authenticator{AllowAnonymous: true}})
	s.Mount("/slab/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := auth.FromContext(r.Context())
		io.WriteString(w, "slab for "+p.Name)
	}))
	srv := httptest.NewServer(s)
	defer srv.Close()
	if r, body := do(t, "GET", srv.URL+"/slab/x", nil, ""); r.StatusCode != 200 || body != "slab for anonymous" {
		t.Errorf("mounted handler: %d %q", r.StatusCode, body)
	}
}

// TestConcurrencyLimit: beyond MaxConcurrent requests in flight, a request
// is refused at once with 503 and Retry-After, and served again once one
// finishes.
func TestConcurrencyLimit(t *testing.T) {
	st := storesvc.Wrap(memory.New())
	defer st.Close()
	s := httpapi.New(st, httpapi.Options{MaxConcurrent: 1})
	entered, release := make(chan struct{}), make(chan struct{})
	s.Mount("/block/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	}))
	srv := httptest.NewServer(s)
	defer srv.Close()
	done := make(chan int)
	go func() {
		resp, err := http.Get(srv.URL + "/block/")
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-entered
	r, body := do(t, "GET", srv.URL+"/zarr/k", nil, "")
	if r.StatusCode != 503 || r.Header.Get("Retry-After") == "" || !strings.Contains(body, "concurrent") {
		t.Errorf("request over the limit: %d %q %v", r.StatusCode, body, r.Header)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Errorf("the blocked request: %d", code)
	}
	if r, _ := do(t, "GET", srv.URL+"/zarr/k", nil, ""); r.StatusCode != 404 {
		t.Errorf("after the limit freed: %d, want 404", r.StatusCode)
	}
}

// TestAdversarialHeaders: oversized or repeated credentials and absurd
// ranges are client errors, never a 500 or a large allocation.
func TestAdversarialHeaders(t *testing.T) {
	toks, _ := auth.ParseTokens(strings.NewReader(""))
	srv, _ := newServer(t, httpapi.Options{Authenticator: &auth.Authenticator{Tokens: func() *auth.Tokens { return toks }, AllowAnonymous: true}})
	for _, h := range []map[string]string{
		{"Authorization": "Bearer " + strings.Repeat("a", 20<<10)},
		{"Authorization": "Basic dXNlcjpwYXNz"},
		{"Authorization": "Bearer !!"},
	} {
		if r, _ := do(t, "GET", srv.URL+"/zarr/a/c/0", h, ""); r.StatusCode != 401 {
			t.Errorf("%.40v: %d, want 401", h, r.StatusCode)
		}
	}
	for _, rng := range []string{"bytes=" + strings.Repeat("1", 300) + "-", "bytes=9223372036854775807-", "bytes=-9223372036854775807", "bytes=0-9223372036854775807"} {
		r, _ := do(t, "GET", srv.URL+"/zarr/a/c/0", map[string]string{"Range": rng}, "")
		if r.StatusCode >= 500 {
			t.Errorf("Range %.40s: %d", rng, r.StatusCode)
		}
	}
	if r, _ := do(t, "GET", srv.URL+"/zarr/a/c/0", map[string]string{"Range": "bytes=9223372036854775806-"}, ""); r.StatusCode != 416 {
		t.Errorf("Range far past the end: %d, want 416", r.StatusCode)
	}
	// Mount refuses prefixes that would shadow the store.
	defer func() {
		if recover() == nil {
			t.Error("Mount(/zarr/) did not panic")
		}
	}()
	httpapi.New(storesvc.Wrap(memory.New()), httpapi.Options{}).Mount("/zarr/", http.NotFoundHandler())
}

// TestConsolidateGroups: with ConsolidateGroups a group's zarr.json carries
// its nodes; an array's is served as stored, and so is a group's too large
// to consolidate.
func TestConsolidateGroups(t *testing.T) {
	srv, _ := newServer(t, httpapi.Options{ConsolidateGroups: true})
	r, body := do(t, "GET", srv.URL+"/zarr/zarr.json", nil, "")
	if r.StatusCode != 200 || !strings.Contains(body, `"consolidated_metadata"`) || !strings.Contains(body, `"a":{`) {
		t.Errorf("root group: %d %s", r.StatusCode, body)
	}
	r, body = do(t, "GET", srv.URL+"/zarr/a/zarr.json", nil, "")
	if r.StatusCode != 200 || strings.Contains(body, "consolidated") || r.Header.Get("ETag") == "" {
		t.Errorf("array: %d %s", r.StatusCode, body)
	}
	if r, _ := do(t, "GET", srv.URL+"/zarr/zarr.json", map[string]string{"Range": "bytes=0-3"}, ""); r.StatusCode != 206 {
		t.Errorf("a range of the group's document: %d, want 206 of the stored one", r.StatusCode)
	}
	few, _ := newServer(t, httpapi.Options{ConsolidateGroups: true, MaxListEntries: 2})
	r, body = do(t, "GET", few.URL+"/zarr/zarr.json", nil, "")
	if r.StatusCode != 200 || strings.Contains(body, "consolidated") {
		t.Errorf("group too large to consolidate: %d %s", r.StatusCode, body)
	}
	plain, _ := newServer(t, httpapi.Options{})
	if _, body := do(t, "GET", plain.URL+"/zarr/zarr.json", nil, ""); strings.Contains(body, "consolidated") {
		t.Errorf("consolidated without ConsolidateGroups: %s", body)
	}
}
