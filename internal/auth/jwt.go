package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/zarrgate/zarrgate/errs"
)

// JWTConfig says which JWTs a JWTVerifier accepts.
type JWTConfig struct {
	// IssuerURL is an OIDC issuer: its keys are found by OIDC discovery
	// (IssuerURL/.well-known/openid-configuration, then its jwks_uri), and
	// tokens must carry it as iss. Or, without discovery:
	IssuerURL string
	// JWKSURL is where the signing keys are published, and Issuer the iss
	// tokens must carry (both needed when IssuerURL is empty).
	JWKSURL, Issuer string
	// Audience must be among a token's aud (required: a token the same
	// issuer made for another service is refused).
	Audience string
	// UserClaim names the claim that is the principal's name (default
	// "sub"); GroupsClaim the claim listing its groups (default "groups":
	// an array of strings, or one string; absent: no groups). A name with
	// dots that is not a top-level claim is a path into nested objects
	// ("realm_access.roles").
	UserClaim, GroupsClaim string
	// HTTPClient fetches the discovery document and the keys (default: a
	// client with a 10s timeout).
	HTTPClient *http.Client
	// MinRefresh is the least time between two fetches of the keys that
	// a token signed by an unknown key triggers (default 10s): tokens
	// naming made-up keys cannot make the server hammer the issuer.
	MinRefresh time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// signingAlgs are the algorithms accepted: asymmetric only. A JWKS is
// public, so an HMAC "key" from it would let anyone sign; none is never
// accepted.
var signingAlgs = []string{
	oidc.RS256, oidc.RS384, oidc.RS512, oidc.PS256, oidc.PS384, oidc.PS512,
	oidc.ES256, oidc.ES384, oidc.ES512, oidc.EdDSA,
}

// JWTVerifier checks JWTs: signature against the issuer's published
// keys (refetched when a token names a key not seen yet, so key rotation
// at the issuer is followed), iss, aud, exp and nbf (coreos/go-oidc).
type JWTVerifier struct {
	v           *oidc.IDTokenVerifier
	keys        *keySet
	issuer      string
	audience    string
	userClaim   string
	groupsClaim string
}

// NewJWTVerifier makes a verifier, doing OIDC discovery (if
// c.IssuerURL) and fetching the keys once: an issuer that cannot be
// reached is an error here, at start-up.
func NewJWTVerifier(ctx context.Context, c JWTConfig) (*JWTVerifier, error) {
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if c.MinRefresh <= 0 {
		c.MinRefresh = 10 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.UserClaim == "" {
		c.UserClaim = "sub"
	}
	if c.GroupsClaim == "" {
		c.GroupsClaim = "groups"
	}
	if c.Audience == "" {
		return nil, errors.New("a JWT audience is required: the aud tokens must carry for this service")
	}
	issuer, jwksURL := c.Issuer, c.JWKSURL
	switch {
	case c.IssuerURL != "" && (c.JWKSURL != "" || c.Issuer != ""):
		return nil, errors.New("give either an OIDC issuer URL (discovery) or a JWKS URL and an issuer, not both")
	case c.IssuerURL != "":
		p, err := oidc.NewProvider(oidc.ClientContext(ctx, c.HTTPClient), c.IssuerURL)
		if err != nil {
			return nil, fmt.Errorf("OIDC discovery at %s: %w", c.IssuerURL, err)
		}
		var doc struct {
			JWKSURI string `json:"jwks_uri"`
		}
		if err := p.Claims(&doc); err != nil || doc.JWKSURI == "" {
			return nil, fmt.Errorf("OIDC discovery at %s: no jwks_uri in the discovery document", c.IssuerURL)
		}
		issuer, jwksURL = c.IssuerURL, doc.JWKSURI
	case c.JWKSURL == "" || c.Issuer == "":
		return nil, errors.New("a JWKS URL needs the issuer its tokens carry, and the other way round")
	}
	ks := &keySet{url: jwksURL, client: c.HTTPClient, minRefresh: c.MinRefresh, now: c.Now}
	if err := ks.fetch(ctx); err != nil {
		return nil, err
	}
	v := oidc.NewVerifier(issuer, ks, &oidc.Config{ClientID: c.Audience, SupportedSigningAlgs: signingAlgs, Now: c.Now})
	return &JWTVerifier{v: v, keys: ks, issuer: issuer, audience: c.Audience, userClaim: c.UserClaim, groupsClaim: c.GroupsClaim}, nil
}

// Issuer is the iss the verifier accepts.
func (j *JWTVerifier) Issuer() string { return j.issuer }

// Verify checks raw and returns its principal (Method "jwt"). Its errors
// are Unauthenticated (Unavailable when the issuer's keys could not be
// fetched) and never quote the token.
func (j *JWTVerifier) Verify(ctx context.Context, raw string) (Principal, error) {
	var n note
	tok, err := j.v.Verify(context.WithValue(ctx, noteKey{}, &n), raw)
	if err != nil {
		if n.fetchErr != nil { // go-oidc keeps only the text of the key set's errors
			err = n.fetchErr
		}
		return Principal{}, j.explain(err, raw)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return Principal{}, errs.New(errs.Unauthenticated, "JWT: unreadable claims")
	}
	name, _ := claimAt(claims, j.userClaim).(string)
	if err := checkName(name); err != nil {
		return Principal{}, errs.New(errs.Unauthenticated, "JWT: claim %q must be the caller's name: %v", j.userClaim, err)
	}
	p := Principal{Name: name, Method: "jwt"}
	switch g := claimAt(claims, j.groupsClaim).(type) {
	case nil:
	case string:
		p.Groups = []string{g}
	case []any:
		for _, v := range g {
			s, ok := v.(string)
			if !ok {
				return Principal{}, errs.New(errs.Unauthenticated, "JWT: claim %q must be a list of strings", j.groupsClaim)
			}
			p.Groups = append(p.Groups, s)
		}
	default:
		return Principal{}, errs.New(errs.Unauthenticated, "JWT: claim %q must be a list of strings", j.groupsClaim)
	}
	return p, nil
}

// claimAt returns the claim name, or the value at its dotted path.
func claimAt(claims map[string]any, name string) any {
	if v, ok := claims[name]; ok {
		return v
	}
	var cur any = claims
	for part := range strings.SplitSeq(name, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}

// errUnknownKey is a signature no published key verifies.
var errUnknownKey = errors.New("unknown key")

// note is where the key set records, for Verify, why it failed.
type note struct{ fetchErr error }

type noteKey struct{}

// explain turns go-oidc's errors into messages for the caller that name
// what is wrong without repeating the token.
func (j *JWTVerifier) explain(err error, raw string) error {
	var expired *oidc.TokenExpiredError
	var fetch *fetchError
	msg := err.Error()
	switch {
	case errors.As(err, &fetch):
		return errs.New(errs.Unavailable, "JWT: the issuer's keys could not be fetched to check the token's signature: %v", fetch.err)
	case errors.As(err, &expired):
		return errs.New(errs.Unauthenticated, "JWT expired at %s", expired.Expiry.UTC().Format(time.RFC3339))
	case strings.Contains(msg, "malformed jwt"):
		if strings.Contains(msg, "algorithm") {
			return errs.New(errs.Unauthenticated, "JWT: signing algorithm not accepted (want one of %s)", strings.Join(signingAlgs, ", "))
		}
		return errs.New(errs.Unauthenticated, "malformed JWT")
	case strings.Contains(msg, "signature"):
		// go-oidc checks the signature before the claims, so a token of
		// another issuer, signed with that issuer's key, ends here. Its
		// (unverified) iss only words the message: it is the caller's own.
		if iss, ok := unverifiedIssuer(raw); ok && iss != j.issuer {
			return errs.New(errs.Unauthenticated, "JWT issued by another issuer (iss %q, want %s): no key of %s verifies its signature", iss, j.issuer, j.issuer)
		}
		return errs.New(errs.Unauthenticated, "JWT: the signature does not verify with any key of the issuer %s", j.issuer)
	case strings.Contains(msg, "different provider"):
		return errs.New(errs.Unauthenticated, "JWT issued by another issuer (want %s)", j.issuer)
	case strings.Contains(msg, "expected audience"):
		return errs.New(errs.Unauthenticated, "JWT not meant for this service: its audience lacks %q", j.audience)
	case strings.Contains(msg, "nbf"):
		return errs.New(errs.Unauthenticated, "JWT not valid yet (nbf in the future)")
	}
	return errs.New(errs.Unauthenticated, "invalid JWT")
}

// maxQuotedIssuer bounds how much of an unverified iss a message quotes.
const maxQuotedIssuer = 200

// unverifiedIssuer returns the iss claim of a JWS in compact form without
// verifying anything, cut to maxQuotedIssuer bytes: for messages only.
func unverifiedIssuer(raw string) (string, bool) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return "", false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", false
	}
	var c struct {
		Iss *string `json:"iss"`
	}
	if json.Unmarshal(payload, &c) != nil || c.Iss == nil {
		return "", false
	}
	iss := *c.Iss
	if len(iss) > maxQuotedIssuer {
		iss = iss[:maxQuotedIssuer] + "…"
	}
	return iss, true
}

// fetchError is a failed fetch of the keys.
type fetchError struct{ err error }

func (e *fetchError) Error() string { return "fetching the issuer's keys: " + e.err.Error() }
func (e *fetchError) Unwrap() error { return e.err }

// maxJWKSBytes bounds a key set document.
const maxJWKSBytes = 1 << 20

// keySet is an oidc.KeySet: the issuer's public keys, fetched from its
// JWKS URL, and again when a token's key is not among them, at most once
// per minRefresh.
type keySet struct {
	url        string
	client     *http.Client
	minRefresh time.Duration
	now        func() time.Time

	keys    atomic.Pointer[[]jose.JSONWebKey]
	mu      sync.Mutex // serialises fetches; guards fetched and lastErr
	fetched time.Time
	lastErr error // of the last fetch
}

func (k *keySet) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSigned(raw, joseAlgs)
	if err != nil {
		return nil, fmt.Errorf("oidc: malformed jwt: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("oidc: malformed jwt: want one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	if p, ok := verifyWith(jws, kid, k.keys.Load()); ok {
		return p, nil
	}
	if err := k.refresh(ctx); err != nil {
		if n, ok := ctx.Value(noteKey{}).(*note); ok {
			n.fetchErr = err
		}
		return nil, err
	}
	if p, ok := verifyWith(jws, kid, k.keys.Load()); ok {
		return p, nil
	}
	return nil, errUnknownKey
}

var joseAlgs = func() []jose.SignatureAlgorithm {
	a := make([]jose.SignatureAlgorithm, len(signingAlgs))
	for i, s := range signingAlgs {
		a[i] = jose.SignatureAlgorithm(s)
	}
	return a
}()

func verifyWith(jws *jose.JSONWebSignature, kid string, keys *[]jose.JSONWebKey) ([]byte, bool) {
	if keys == nil {
		return nil, false
	}
	for i := range *keys {
		key := &(*keys)[i]
		if kid != "" && key.KeyID != kid {
			continue
		}
		if p, err := jws.Verify(key); err == nil {
			return p, true
		}
	}
	return nil, false
}

// refresh fetches the keys unless they were fetched less than minRefresh
// ago: then the caller's token is checked against the keys held, or gets
// the error of that last fetch.
func (k *keySet) refresh(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.now().Sub(k.fetched) < k.minRefresh {
		return k.lastErr
	}
	return k.fetchLocked(ctx)
}

func (k *keySet) fetch(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.fetchLocked(ctx)
}

func (k *keySet) fetchLocked(ctx context.Context) error {
	k.fetched = k.now() // failures count too: a dead issuer is not asked on every call
	keys, err := k.download(ctx)
	if err != nil {
		k.lastErr = &fetchError{fmt.Errorf("%s: %w", k.url, err)}
		return k.lastErr
	}
	k.lastErr = nil
	k.keys.Store(&keys)
	return nil
}

// download reads the key set, keeping the public keys of the kinds it
// knows and skipping others (RFC 7517 §5), and symmetric keys.
func (k *keySet) download(ctx context.Context) ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("key set larger than %d bytes", maxJWKSBytes)
	}
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("not a JSON Web Key Set: %v", err)
	}
	var keys []jose.JSONWebKey
	for _, raw := range doc.Keys {
		var key jose.JSONWebKey
		if json.Unmarshal(raw, &key) != nil || !key.Valid() || key.Use == "enc" {
			continue
		}
		if _, symmetric := key.Key.([]byte); symmetric {
			continue
		}
		pub := key.Public()
		if !pub.Valid() {
			continue
		}
		keys = append(keys, pub)
	}
	return keys, nil
}
