package auth_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/auth"
)

// TestParseTokensRefuses: every malformed token file is an error naming
// the line, never quoting a token pasted in it.
func TestParseTokensRefuses(t *testing.T) {
	tok, h, _ := auth.NewToken()
	cases := map[string]string{
		"token in clear":     tok + "  alice",
		"hash without user":  h,
		"four fields":        h + " alice a,b extra",
		"short hash":         "sha256:abcd alice",
		"not hex":            "sha256:" + strings.Repeat("zz", 32) + " alice",
		"other algorithm":    "md5:" + strings.Repeat("00", 16) + " alice",
		"anonymous":          h + " anonymous",
		"empty group":        h + " alice a,,b",
		"duplicate hash":     h + " alice\n" + h + " bob",
		"control characters": h + " al\x01ice",
		"huge":               strings.Repeat("#", 17<<20),
	}
	for name, content := range cases {
		_, err := auth.ParseTokens(strings.NewReader(content))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), tok) {
			t.Errorf("%s: the error quotes the token: %v", name, err)
		}
	}
	ts, err := auth.ParseTokens(strings.NewReader("# comment\n\n  " + h + "\tbob\tops,dev  \n"))
	if err != nil || ts.Len() != 1 {
		t.Fatalf("valid file: %v", err)
	}
	if p, ok := ts.Lookup(tok); !ok || p.Name != "bob" || len(p.Groups) != 2 || p.Method != "token" {
		t.Fatalf("Lookup: %+v %v", p, ok)
	}
	if _, ok := ts.Lookup(strings.TrimPrefix(h, auth.TokenHashPrefix)); ok {
		t.Fatal("the hash itself is accepted as a token")
	}
	if tok2, _, _ := auth.NewToken(); tok2 == tok || !strings.HasPrefix(tok2, auth.TokenPrefix) || len(tok2) < 40 || strings.Count(tok2, ".") != 0 {
		t.Fatalf("NewToken: %q after %q", tok2, tok)
	}
}

// TestAuthenticateHeaders: malformed authorization headers are
// Unauthenticated, before any source is asked.
func TestAuthenticateHeaders(t *testing.T) {
	tok, h, _ := auth.NewToken()
	ts, _ := auth.ParseTokens(strings.NewReader(h + " alice"))
	a := &auth.Authenticator{Tokens: func() *auth.Tokens { return ts }}
	for name, v := range map[string][]string{
		"none":              nil,
		"two headers":       {"Bearer " + tok, "Bearer " + tok},
		"control character": {"Bearer " + tok + "\x00"},
		"non-ASCII":         {"Bearer " + tok + "é"},
		"no token":          {"Bearer"},
		"only =":            {"Bearer ==="},
		"JWT, none taken":   {"Bearer eyJ.eyJ.sig"},
		"too large":         {"Bearer " + strings.Repeat("a", auth.MaxAuthorizationBytes)},
	} {
		_, err := a.Authenticate(context.Background(), auth.Credentials{Authorization: v})
		if !errors.Is(err, errs.Unauthenticated) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if p, err := a.Authenticate(context.Background(), auth.Credentials{Authorization: []string{"  BEARER   " + tok + " "}}); err != nil || p.Name != "alice" {
		t.Fatalf("spaces and case: %+v %v", p, err)
	}
}

// TestAnonymousIf: a call without credentials is let in as anonymous
// while AnonymousIf says so (a policy granting anonymous something), and
// refused asking for credentials once it does not; bad credentials are
// refused either way.
func TestAnonymousIf(t *testing.T) {
	tok, h, _ := auth.NewToken()
	ts, _ := auth.ParseTokens(strings.NewReader(h + " alice"))
	grants := true
	a := &auth.Authenticator{Tokens: func() *auth.Tokens { return ts }, AnonymousIf: func() bool { return grants }}
	ctx := context.Background()
	if p, err := a.Authenticate(ctx, auth.Credentials{}); err != nil || p.Name != auth.Anonymous {
		t.Fatalf("no credentials, anonymous granted: %+v %v", p, err)
	}
	if _, err := a.Authenticate(ctx, auth.Credentials{Authorization: []string{"Bearer zg_unknown"}}); !errors.Is(err, errs.Unauthenticated) {
		t.Fatalf("unknown token, anonymous granted: %v", err)
	}
	if p, err := a.Authenticate(ctx, auth.Credentials{Authorization: []string{"Bearer " + tok}}); err != nil || p.Name != "alice" {
		t.Fatalf("good token: %+v %v", p, err)
	}
	grants = false
	if _, err := a.Authenticate(ctx, auth.Credentials{}); !errors.Is(err, errs.Unauthenticated) || !strings.Contains(err.Error(), "no credentials: this server needs an 'authorization: Bearer TOKEN' header") {
		t.Fatalf("no credentials, nothing granted to anonymous: %v", err)
	}
}
