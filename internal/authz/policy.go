// Package authz decides what a caller may do: a policy (a YAML or JSON
// file) grants principals permissions on key prefixes of the store, and
// the policy answers "may this principal do this to this key or prefix?".
// It knows nothing of gRPC: the interceptor that asks it for every call
// is in package authzgrpc; the audit log of what was allowed and denied
// is here (Auditor).
//
// Prefixes match at segment boundaries: a grant on "a" (or "a/") covers
// the key "a" and every key under "a/", never "ab" or "ab/x"; the grant ""
// covers the whole store. Keys are checked only once the store's own key
// rules (storesvc.ValidateKey) accept them, and matched byte for byte, so
// no other spelling of a key ("a/../b", "a//b", "./a", "a%2Fb", a Unicode
// look-alike of "/") can fall under a prefix it is not under: such keys
// are invalid, or name other keys that the grant does not cover.
//
// Grants only ever allow; there are no deny rules, so a permission on a
// whole prefix is granted exactly when one rule covers it.
package authz

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/storesvc"
)

// Perm is a permission.
type Perm uint8

// The permissions. Admin on a prefix implies the others on it, and is
// what erasing or deleting the whole store ("") needs.
const (
	Read Perm = 1 << iota
	Write
	Delete
	Admin
)

var permNames = []struct {
	p    Perm
	name string
}{{Read, "read"}, {Write, "write"}, {Delete, "delete"}, {Admin, "admin"}}

// String names the permissions p holds, joined with "+".
func (p Perm) String() string {
	var names []string
	for _, n := range permNames {
		if p&n.p != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// ParsePerm parses one permission name.
func ParsePerm(s string) (Perm, error) {
	for _, n := range permNames {
		if s == n.name {
			return n.p, nil
		}
	}
	return 0, fmt.Errorf("unknown permission %q (want read, write, delete or admin)", s)
}

// Principal forms in a policy file.
const (
	// AnyAuthenticated ("*") is every caller that is not anonymous.
	AnyAuthenticated = "*"
	userPrefix       = "user:"
	groupPrefix      = "group:"
)

// grant is one (principal, permissions, prefix) of a rule.
type grant struct {
	principal string // "anonymous", "*", "user:NAME" or "group:NAME"
	perms     Perm
	prefix    string // "" or a valid key, without trailing "/"
}

// Policy is a parsed policy: immutable, safe for concurrent use.
type Policy struct {
	grants []grant
	source string
}

// File is the policy file's format.
type File struct {
	// Rules grant permissions; a caller may do what any rule grants it.
	Rules []Rule `yaml:"rules" json:"rules"`
}

// Rule grants every listed principal every listed permission on every
// listed prefix.
type Rule struct {
	Principals  []string `yaml:"principals" json:"principals"`
	Permissions []string `yaml:"permissions" json:"permissions"`
	Prefixes    []string `yaml:"prefixes" json:"prefixes"`
}

// MaxPolicyBytes bounds a policy file.
const MaxPolicyBytes = 4 << 20

// Load reads and parses the policy file at path.
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errs.Wrap(errs.InvalidArgument, err, "policy")
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxPolicyBytes+1))
	if err != nil {
		return nil, errs.Wrap(errs.InvalidArgument, err, "policy %s", path)
	}
	if len(data) > MaxPolicyBytes {
		return nil, errs.New(errs.InvalidArgument, "policy %s: larger than %d bytes", path, MaxPolicyBytes)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, errs.Wrap(errs.InvalidArgument, err, "policy %s", path)
	}
	p.source = path
	return p, nil
}

// Parse parses a policy document, YAML or JSON (JSON is YAML). Unknown
// fields, unknown permissions or principal forms, malformed prefixes and
// duplicates are errors naming the rule.
func Parse(data []byte) (*Policy, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("empty document (a policy that denies everything is `rules: []`)")
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f struct {
		Rules *[]Rule `yaml:"rules"`
	}
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("parse: %v", err)
	}
	var extra any
	if err := dec.Decode(&extra); err != io.EOF {
		return nil, errors.New("more than one YAML document")
	}
	if f.Rules == nil {
		return nil, errors.New(`no "rules" list (a policy that denies everything is ` + "`rules: []`)")
	}
	return compile(File{Rules: *f.Rules})
}

// Compile checks f and makes a policy of it.
func Compile(f File) (*Policy, error) { return compile(f) }

func compile(f File) (*Policy, error) {
	p := &Policy{}
	seen := map[grant]int{} // (principal, single permission, prefix) -> rule number
	for i, r := range f.Rules {
		n := i + 1
		if len(r.Principals) == 0 || len(r.Permissions) == 0 || len(r.Prefixes) == 0 {
			return nil, fmt.Errorf("rule %d: principals, permissions and prefixes must each list at least one entry", n)
		}
		for _, pr := range r.Principals {
			if err := checkPrincipal(pr); err != nil {
				return nil, fmt.Errorf("rule %d: %v", n, err)
			}
		}
		if d, ok := dup(r.Principals); ok {
			return nil, fmt.Errorf("rule %d: principal %q listed twice", n, d)
		}
		var perms Perm
		for _, s := range r.Permissions {
			pm, err := ParsePerm(s)
			if err != nil {
				return nil, fmt.Errorf("rule %d: %v", n, err)
			}
			if perms&pm != 0 {
				return nil, fmt.Errorf("rule %d: permission %q listed twice", n, s)
			}
			perms |= pm
		}
		prefixes := make([]string, len(r.Prefixes))
		for j, s := range r.Prefixes {
			pf, err := normPrefix(s)
			if err != nil {
				return nil, fmt.Errorf("rule %d: %v", n, err)
			}
			prefixes[j] = pf
		}
		if d, ok := dup(prefixes); ok {
			return nil, fmt.Errorf("rule %d: prefix %q listed twice", n, d)
		}
		for _, pr := range r.Principals {
			for _, pf := range prefixes {
				for _, pn := range permNames {
					if perms&pn.p == 0 {
						continue
					}
					k := grant{principal: pr, perms: pn.p, prefix: pf}
					if m, ok := seen[k]; ok {
						return nil, fmt.Errorf("rule %d: %s %q on %q is granted by rule %d already", n, pr, pn.name, pf, m)
					}
					seen[k] = n
				}
				p.grants = append(p.grants, grant{principal: pr, perms: perms, prefix: pf})
			}
		}
	}
	return p, nil
}

// dup returns a value that occurs twice in s.
func dup(s []string) (string, bool) {
	seen := map[string]bool{}
	for _, x := range s {
		if seen[x] {
			return x, true
		}
		seen[x] = true
	}
	return "", false
}

func checkPrincipal(s string) error {
	switch {
	case s == auth.Anonymous || s == AnyAuthenticated:
		return nil
	case strings.HasPrefix(s, userPrefix) || strings.HasPrefix(s, groupPrefix):
		_, name, _ := strings.Cut(s, ":")
		if name == "" || strings.TrimSpace(name) != name {
			return fmt.Errorf("principal %q: empty name or surrounding spaces", s)
		}
		for _, r := range name {
			if r < 0x20 || r == 0x7f {
				return fmt.Errorf("principal %q: control character in the name", s)
			}
		}
		return nil
	}
	return fmt.Errorf("unknown principal %q (want user:NAME, group:NAME, anonymous or * for every authenticated caller)", s)
}

// normPrefix turns a policy prefix ("" the whole store, "a/b" or "a/b/")
// into its canonical form: "" or a valid store key.
func normPrefix(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	k := strings.TrimSuffix(s, "/")
	if err := storesvc.ValidateKey(k); err != nil {
		return "", fmt.Errorf("prefix %q: must be \"\" (everything) or a valid store key, optionally ending with one \"/\": %v", s, err)
	}
	return k, nil
}

// Source names where the policy came from (its file), for messages.
func (p *Policy) Source() string { return p.source }

// covers reports whether the grant prefix g covers path (a valid key, or
// "" for the whole store): g is "", or path is g or under g/.
func covers(g, path string) bool {
	return g == "" || path == g || (len(path) > len(g) && path[len(g)] == '/' && strings.HasPrefix(path, g))
}

// under reports whether g lies strictly inside path's subtree.
func under(g, path string) bool {
	if path == "" {
		return g != ""
	}
	return len(g) > len(path) && g[len(path)] == '/' && strings.HasPrefix(g, path)
}

// applies reports whether the grant's principal form matches p.
func applies(form string, p auth.Principal) bool {
	switch {
	case form == auth.Anonymous:
		return true // what anonymous callers may do, everyone may
	case IsAnonymous(p):
		return false
	case form == AnyAuthenticated:
		return true
	case strings.HasPrefix(form, userPrefix):
		return form[len(userPrefix):] == p.Name
	case strings.HasPrefix(form, groupPrefix):
		return slices.Contains(p.Groups, form[len(groupPrefix):])
	}
	return false
}

// GrantsAnonymous reports whether the policy grants the anonymous
// principal anything: whether callers without credentials have any use
// at all (auth.Authenticator.AnonymousIf).
func (pol *Policy) GrantsAnonymous() bool {
	for _, g := range pol.grants {
		if g.principal == auth.Anonymous {
			return true
		}
	}
	return false
}

// IsAnonymous reports whether p is the anonymous caller.
func IsAnonymous(p auth.Principal) bool {
	return p.Name == "" || p.Name == auth.Anonymous
}

// effective is what a grant gives: admin implies everything.
func effective(g grant) Perm {
	if g.perms&Admin != 0 {
		return Read | Write | Delete | Admin
	}
	return g.perms
}

// Allowed reports whether p holds every permission of want on the whole
// of path: "" (the store) or a valid key, which stands for the key and
// everything under it. Each permission must come from one grant covering
// path (grants cannot add up to a whole subtree).
func (pol *Policy) Allowed(p auth.Principal, want Perm, path string) bool {
	var have Perm
	for _, g := range pol.grants {
		if applies(g.principal, p) && covers(g.prefix, path) {
			have |= effective(g)
		}
	}
	return have&want == want
}

// MaySeeUnder reports whether a listing of path (a valid key, or "" for
// the root) can show p anything: p may read path, or holds read on
// something under it.
func (pol *Policy) MaySeeUnder(p auth.Principal, path string) bool {
	for _, g := range pol.grants {
		if applies(g.principal, p) && effective(g)&Read != 0 && (covers(g.prefix, path) || under(g.prefix, path)) {
			return true
		}
	}
	return false
}

// metadataDocs are the names of the documents that describe a node and
// may describe what lies below it (consolidated metadata, NCZarr's lists
// of children).
var metadataDocs = map[string]bool{"zarr.json": true, ".zarray": true, ".zgroup": true, ".zattrs": true, ".zmetadata": true}

// ReadPath returns the path whose read permission reading key needs: key
// itself, except for a node's metadata documents (zarr.json, .zgroup,
// .zarray, .zattrs, .zmetadata), which need read on the whole node (the
// key's directory; "" at the root), because a group's documents may carry
// consolidated metadata or names of the nodes below it.
func ReadPath(key string) string {
	dir, base := "", key
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		dir, base = key[:i], key[i+1:]
	}
	if metadataDocs[base] {
		return dir
	}
	return key
}
