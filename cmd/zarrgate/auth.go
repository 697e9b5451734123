// Authentication flags of every serving command (--tokens, --oidc-issuer,
// --jwks-url, --jwt-*, --allow-anonymous), the client commands' --token,
// and `zarrgate token new` (internal/auth, docs/security.md).

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/internal/auth"
	"github.com/zarrgate/zarrgate/internal/security"
)

type authFlags struct {
	tokens, oidcIssuer, jwksURL, jwtIssuer, audience, userClaim, groupsClaim *string
	allowAnonymous                                                           *bool
}

func addAuthFlags(fs *flag.FlagSet) authFlags {
	return authFlags{
		tokens:         fs.String("tokens", "", "accept the static bearer tokens of this file (lines of sha256:HEX USER [GROUP,...]: hashes only, see 'zarrgate token new' and docs/security.md); reloaded when it changes"),
		oidcIssuer:     fs.String("oidc-issuer", "", "accept JWTs of this OIDC issuer (its keys found by discovery at URL/.well-known/openid-configuration); needs --jwt-audience"),
		jwksURL:        fs.String("jwks-url", "", "accept JWTs signed by the keys published at this JWKS URL (without discovery); needs --jwt-issuer and --jwt-audience"),
		jwtIssuer:      fs.String("jwt-issuer", "", "the iss JWTs verified with --jwks-url must carry"),
		audience:       fs.String("jwt-audience", "", "the aud JWTs must carry (this service's client ID at the issuer)"),
		userClaim:      fs.String("jwt-user-claim", "sub", "the JWT claim that names the caller (a.b for a nested claim)"),
		groupsClaim:    fs.String("jwt-groups-claim", "groups", "the JWT claim listing the caller's groups (a.b for a nested claim)"),
		allowAnonymous: fs.Bool("allow-anonymous", false, "let calls without credentials in, as the principal anonymous (bad credentials are still refused); needs an authentication source (--tokens, --oidc-issuer, --jwks-url or --client-ca)"),
	}
}

// check refuses flags that do not go together; clientCA is --client-ca.
func (a authFlags) check(clientCA string) error {
	jwt := *a.oidcIssuer != "" || *a.jwksURL != ""
	switch {
	case *a.oidcIssuer != "" && (*a.jwksURL != "" || *a.jwtIssuer != ""):
		return usageError{errors.New("--oidc-issuer finds the keys and the issuer by discovery: it goes without --jwks-url and --jwt-issuer")}
	case (*a.jwksURL == "") != (*a.jwtIssuer == "") && *a.oidcIssuer == "":
		return usageError{errors.New("--jwks-url and --jwt-issuer go together")}
	case jwt && *a.audience == "":
		return usageError{errors.New("JWTs need --jwt-audience: the aud that names this service (a token the issuer made for another service must not pass)")}
	case !jwt && *a.audience != "":
		return usageError{errors.New("--jwt-audience needs --oidc-issuer or --jwks-url")}
	case *a.allowAnonymous && !jwt && *a.tokens == "" && clientCA == "":
		return usageError{errors.New("--allow-anonymous needs an authentication source (--tokens, --oidc-issuer, --jwks-url or --client-ca): without one every call is anonymous already")}
	}
	return nil
}

// config returns the authentication the flags ask for (mtls is whether
// --client-ca makes clients present verified certificates).
func (a authFlags) config(mtls bool) security.Authentication {
	c := security.Authentication{TokensFile: *a.tokens, MTLS: mtls, AllowAnonymous: *a.allowAnonymous}
	if *a.oidcIssuer != "" || *a.jwksURL != "" {
		c.JWT = &auth.JWTConfig{
			IssuerURL: *a.oidcIssuer, JWKSURL: *a.jwksURL, Issuer: *a.jwtIssuer, Audience: *a.audience,
			UserClaim: *a.userClaim, GroupsClaim: *a.groupsClaim,
		}
	}
	return c
}

// tokenFlag adds --token to a client command and returns the client
// options it makes once parsed.
func tokenFlag(fs *flag.FlagSet) func() []client.Option {
	tok := fs.String("token", "", "bearer token sent with every call (a static token or a JWT); sent only over TLS, or in plaintext to a loopback address or unix socket. Prefer $ZARRGATE_TOKEN: a command line is visible to other users")
	return func() []client.Option {
		if *tok == "" {
			return nil
		}
		return []client.Option{client.WithToken(strings.TrimSpace(*tok))}
	}
}

const tokenUsage = "usage: zarrgate token new --user NAME [--groups a,b] [--append FILE]"

// runToken is `zarrgate token new`: a fresh random token and its token
// file entry.
func runToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("token", stderr)
	user := fs.String("user", "", "the user the token authenticates (required)")
	groups := fs.String("groups", "", "comma-separated groups of the user")
	appendTo := fs.String("append", "", "append the entry to this token file (created with mode 0600 if missing) and print only the token")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "new" {
		return usageError{errors.New(tokenUsage)}
	}
	if *user == "" {
		return usageError{errors.New("--user is required: " + tokenUsage)}
	}
	var gs []string
	if *groups != "" {
		gs = strings.Split(*groups, ",")
	}
	tok, hash, err := auth.NewToken()
	if err != nil {
		return err
	}
	line, err := auth.TokenLine(hash, *user, gs)
	if err != nil {
		return usageError{fmt.Errorf("--user or --groups: %v", err)}
	}
	if *appendTo != "" {
		f, err := os.OpenFile(*appendTo, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintln(f, line); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintln(stdout, tok)
		return nil
	}
	fmt.Fprintf(stdout, "%s\n%s\n", tok, line)
	return nil
}
