package authz

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/auth"
)

func mustParse(t *testing.T, doc string) *Policy {
	t.Helper()
	p, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	alice = auth.Principal{Name: "alice", Groups: []string{"climate"}, Method: "token"}
	bob   = auth.Principal{Name: "bob", Method: "jwt"}
	anon  = auth.Principal{Name: auth.Anonymous, Method: "none"}
)

func TestAllowed(t *testing.T) {
	p := mustParse(t, `
rules:
  - principals: [user:alice]
    permissions: [read, write]
    prefixes: ["a/"]
  - principals: [group:climate]
    permissions: [delete]
    prefixes: [climate/t2m]
  - principals: [anonymous]
    permissions: [read]
    prefixes: [public]
  - principals: ["*"]
    permissions: [read]
    prefixes: [shared]
  - principals: [user:bob]
    permissions: [admin]
    prefixes: [""]
`)
	cases := []struct {
		who  auth.Principal
		perm Perm
		path string
		want bool
	}{
		{alice, Read, "a", true},
		{alice, Read, "a/b/c", true},
		{alice, Read | Write, "a/b", true},
		{alice, Read, "ab", false},   // segment boundary
		{alice, Read, "ab/c", false}, // segment boundary
		{alice, Read, "", false},     // the whole store is more than a/
		{alice, Delete, "a/b", false},
		{alice, Delete, "climate/t2m/c/0", true}, // by group
		{alice, Delete, "climate/t2m2", false},
		{alice, Delete, "climate", false},
		{alice, Read, "public/x", true}, // what anonymous may, everyone may
		{anon, Read, "public/x", true},
		{anon, Write, "public/x", false},
		{anon, Read, "shared/x", false}, // * is every authenticated caller
		{alice, Read, "shared/x", true},
		{bob, Read | Write | Delete | Admin, "", true}, // admin implies everything
		{bob, Delete, "any/key", true},
		{auth.Principal{Name: "alice", Method: "token"}, Delete, "climate/t2m", false}, // not in the group
		{auth.Principal{}, Read, "public", true},                                       // no name: anonymous
		{auth.Principal{}, Read, "shared", false},
	}
	for _, c := range cases {
		if got := p.Allowed(c.who, c.perm, c.path); got != c.want {
			t.Errorf("%s %v on %q: %v, want %v", c.who.Name, c.perm, c.path, got, c.want)
		}
	}
	see := []struct {
		who  auth.Principal
		path string
		want bool
	}{
		{alice, "", true}, {alice, "a", true}, {alice, "a/x", true}, {alice, "b", false},
		{alice, "climate", false}, // delete is not read
		{anon, "", true}, {anon, "pub", false},
	}
	for _, c := range see {
		if got := p.MaySeeUnder(c.who, c.path); got != c.want {
			t.Errorf("MaySeeUnder(%s, %q) = %v, want %v", c.who.Name, c.path, got, c.want)
		}
	}
}

func TestReadPath(t *testing.T) {
	for k, want := range map[string]string{
		"zarr.json": "", "a/zarr.json": "a", "a/b/.zarray": "a/b", "a/.zmetadata": "a", "a/.zattrs": "a", "a/.zgroup": "a",
		"a/c/0": "a/c/0", "a/zarr.jsonx": "a/zarr.jsonx", "zarr.json/x": "zarr.json/x",
	} {
		if got := ReadPath(k); got != want {
			t.Errorf("ReadPath(%q) = %q, want %q", k, got, want)
		}
	}
}

// TestBadPolicies: every malformed policy is refused with a message that
// says what is wrong, and never panics.
func TestBadPolicies(t *testing.T) {
	rule := func(principals, perms, prefixes string) string {
		return "rules:\n  - principals: " + principals + "\n    permissions: " + perms + "\n    prefixes: " + prefixes + "\n"
	}
	cases := map[string]struct{ doc, want string }{
		"empty":              {"", "empty document"},
		"blank":              {"  \n\n", "empty document"},
		"no rules":           {"{}", `no "rules"`},
		"null rules":         {"rules:", `no "rules"`},
		"not a list":         {"rules: 3", "parse"},
		"unknown top field":  {"rules: []\nversion: 2", "not found"},
		"unknown rule field": {"rules:\n  - principals: [anonymous]\n    permissions: [read]\n    prefixes: [a]\n    deny: true", "not found"},
		"typo in field":      {"rules:\n  - principal: [anonymous]\n    permissions: [read]\n    prefixes: [a]", "not found"},
		"unknown permission": {rule("[anonymous]", "[read, execute]", "[a]"), `unknown permission "execute"`},
		"permission case":    {rule("[anonymous]", "[Read]", "[a]"), `unknown permission "Read"`},
		"duplicate perm":     {rule("[anonymous]", "[read, read]", "[a]"), "listed twice"},
		"duplicate prefix":   {rule("[anonymous]", "[read]", "[a, a/]"), "listed twice"},
		"duplicate root":     {rule("[anonymous]", "[read]", `["", ""]`), "listed twice"},
		"duplicate princ":    {rule("[user:x, user:x]", "[read]", "[a]"), "listed twice"},
		"duplicate rule":     {rule("[user:x]", "[read]", "[a]") + "  - principals: [user:x]\n    permissions: [write, read]\n    prefixes: [a/]\n", "rule 1 already"},
		"unknown principal":  {rule("[alice]", "[read]", "[a]"), `unknown principal "alice"`},
		"empty user":         {rule("[\"user:\"]", "[read]", "[a]"), "empty name"},
		"spaced user":        {rule("[\"user: x\"]", "[read]", "[a]"), "surrounding spaces"},
		"control in name":    {rule(`["user:a\tb"]`, "[read]", "[a]"), "control character"},
		"empty lists":        {rule("[]", "[read]", "[a]"), "at least one"},
		"no prefixes":        {"rules:\n  - principals: [anonymous]\n    permissions: [read]", "at least one"},
		"dotdot prefix":      {rule("[anonymous]", "[read]", "[a/../b]"), `prefix "a/../b"`},
		"leading slash":      {rule("[anonymous]", "[read]", "[/a]"), `prefix "/a"`},
		"double slash":       {rule("[anonymous]", "[read]", "[a//b]"), `prefix "a//b"`},
		"two trailing":       {rule("[anonymous]", "[read]", "[a//]"), `prefix "a//"`},
		"only slash":         {rule("[anonymous]", "[read]", `["/"]`), `prefix "/"`},
		"dot prefix":         {rule("[anonymous]", "[read]", "[./a]"), `prefix "./a"`},
		"control prefix":     {rule("[anonymous]", "[read]", `["a\x01"]`), "prefix"},
		"reserved prefix":    {rule("[anonymous]", "[read]", "[.zarrgate-tmp-x]"), "reserved"},
		"long prefix":        {rule("[anonymous]", "[read]", "["+strings.Repeat("a", 2000)+"]"), "prefix"},
		"two documents":      {"rules: []\n---\nrules: []\n", "more than one"},
		"duplicate key":      {"rules: []\nrules: []\n", "already defined"},
		"json unknown field": {`{"rules": [{"principals": ["anonymous"], "permissions": ["read"], "prefixes": ["a"], "x": 1}]}`, "not found"},
		"json bad perm":      {`{"rules": [{"principals": ["anonymous"], "permissions": ["all"], "prefixes": ["a"]}]}`, `unknown permission "all"`},
		"anchors bomb":       {"a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\nrules: []\n", "not found"},
		"binary":             {"\x00\x01\x02rules", "parse"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			if err == nil {
				t.Fatalf("accepted")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}

func TestGoodPolicies(t *testing.T) {
	for name, doc := range map[string]string{
		"deny all": "rules: []",
		"json":     `{"rules": [{"principals": ["user:a"], "permissions": ["read"], "prefixes": ["x/"]}]}`,
		"comments": "# who may do what\nrules:\n  - principals: [anonymous]  # everyone\n    permissions: [read]\n    prefixes: [\"\"]\n",
		"unicode":  "rules:\n  - principals: [\"user:Zoë\"]\n    permissions: [read]\n    prefixes: [données/été]\n",
	} {
		if _, err := Parse([]byte(doc)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(filepath.Join(dir, "missing.yaml"))
	if !errors.Is(err, errs.InvalidArgument) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	os.WriteFile(big, bytes.Repeat([]byte("#"), MaxPolicyBytes+1), 0o600)
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("big file: %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("rules:\n  - principals: [anonymous]\n    permissions: [raed]\n    prefixes: [a]\n"), 0o600)
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "bad.yaml: rule 1: unknown permission \"raed\"") {
		t.Errorf("bad file: %v", err)
	}
}

// TestWatcherReload: a changed file takes effect; an invalid or vanished
// one is logged and the policy in force kept.
func TestWatcherReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(doc string) {
		t.Helper()
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	grantA := "rules:\n  - principals: [anonymous]\n    permissions: [read]\n    prefixes: [a]\n"
	grantB := "rules:\n  - principals: [anonymous]\n    permissions: [read]\n    prefixes: [b]\n"
	write(grantA)
	var logs bytes.Buffer
	w, err := NewWatcher(path, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !w.Policy().Allowed(anon, Read, "a") {
		t.Fatal("initial policy not in force")
	}
	if w.ReloadIfChanged() {
		t.Error("reloaded an unchanged file")
	}
	write(grantB)
	if !w.ReloadIfChanged() || !w.Policy().Allowed(anon, Read, "b") || w.Policy().Allowed(anon, Read, "a") {
		t.Fatal("new policy not in force")
	}
	write("rules:\n  - principals: [anonymous]\n    permissions: [everything]\n    prefixes: [\"\"]\n")
	if w.ReloadIfChanged() || !w.Policy().Allowed(anon, Read, "b") || w.Policy().Allowed(anon, Read, "x") {
		t.Fatal("an invalid file replaced the policy")
	}
	if !strings.Contains(logs.String(), "invalid policy file") || !strings.Contains(logs.String(), "everything") {
		t.Errorf("log %q", logs.String())
	}
	os.Remove(path)
	if w.ReloadIfChanged() || !w.Policy().Allowed(anon, Read, "b") {
		t.Fatal("a vanished file replaced the policy")
	}
	write(grantA)
	if !w.ReloadIfChanged() || !w.Policy().Allowed(anon, Read, "a") {
		t.Fatal("the file back did not take effect")
	}
	// Run picks changes up by itself.
	ctx, cancel := contextWithCancel()
	defer cancel()
	go w.Run(ctx, 10*time.Millisecond)
	write(grantB)
	deadline := time.Now().Add(5 * time.Second)
	for !w.Policy().Allowed(anon, Read, "b") {
		if time.Now().After(deadline) {
			t.Fatal("Run did not reload")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := NewWatcher(path+".missing", slog.Default()); err == nil {
		t.Error("a missing policy file was accepted at start-up")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("rules:\n  - principals: [anonymous]\n    permissions: [read]\n    prefixes: [a]\n"))
	f.Add([]byte(`{"rules": []}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err == nil {
			p.Allowed(alice, Read, "a/b")
			p.MaySeeUnder(anon, "")
		}
	})
}

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}
