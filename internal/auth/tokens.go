package auth

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/zarrgate/zarrgate/internal/filewatch"
)

// A token file lists the static bearer tokens a server accepts, one per
// line, each by its hash, with the user it authenticates and, optionally,
// the user's groups:
//
//	# sha256:HEX  USER  [GROUP,GROUP...]
//	sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  alice  readers,writers
//	sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752  ci-bot
//
// Blank lines and lines starting with # are ignored. The file never holds
// a token itself: a token is a long random secret (NewToken makes 256
// bits), so one SHA-256 of it is as hard to invert as the token is to
// guess, and a slow password hash (bcrypt, argon2) would only cost every
// call time without adding strength. This is the usual practice for API
// tokens (GitHub's, for example).
const TokenHashPrefix = "sha256:"

// TokenPrefix starts every token NewToken makes, so that secret scanners
// and people recognise one.
const TokenPrefix = "zg_"

// maxTokenFileBytes bounds a token file.
const maxTokenFileBytes = 16 << 20

// NewToken returns a fresh random token (256 bits from crypto/rand, as
// base64url after TokenPrefix) and the hash a token file stores for it.
func NewToken() (token, hash string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	token = TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return token, HashToken(token), nil
}

// HashToken returns the hash of token as a token file stores it:
// "sha256:" and the hex SHA-256 of the token's bytes.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return TokenHashPrefix + hex.EncodeToString(sum[:])
}

// TokenLine returns the token file line for a token's hash, a user and
// groups, after checking them as ParseTokens would.
func TokenLine(hash, user string, groups []string) (string, error) {
	line := hash + "  " + user
	if len(groups) > 0 {
		line += "  " + strings.Join(groups, ",")
	}
	if _, err := ParseTokens(strings.NewReader(line)); err != nil {
		return "", err
	}
	return line, nil
}

type tokenEntry struct {
	sum    [sha256.Size]byte
	user   string
	groups []string
}

// Tokens is the content of a token file.
type Tokens struct {
	entries []tokenEntry
}

// Len is the number of tokens.
func (t *Tokens) Len() int { return len(t.entries) }

// ParseTokens reads a token file. Any malformed line is an error naming
// its number (never its content: it may be a token pasted by mistake).
func ParseTokens(r io.Reader) (*Tokens, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxTokenFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxTokenFileBytes {
		return nil, fmt.Errorf("token file larger than %d bytes", maxTokenFileBytes)
	}
	t := &Tokens{}
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxTokenFileBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("line %d: want %sHEX USER [GROUP,GROUP...]", n, TokenHashPrefix)
		}
		h, ok := strings.CutPrefix(f[0], TokenHashPrefix)
		if !ok {
			return nil, fmt.Errorf("line %d: the first field must be a token's hash, %s and 64 hex digits (tokens are never stored in the file; 'zarrgate token new' prints an entry)", n, TokenHashPrefix)
		}
		var e tokenEntry
		if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("line %d: the hash must be %s and 64 hex digits", n, TokenHashPrefix)
		} else {
			copy(e.sum[:], b)
		}
		if prev, dup := seen[e.sum]; dup {
			return nil, fmt.Errorf("line %d: the same token hash as line %d", n, prev)
		}
		seen[e.sum] = n
		if err := checkName(f[1]); err != nil {
			return nil, fmt.Errorf("line %d: user: %w", n, err)
		}
		e.user = f[1]
		if len(f) == 3 {
			for _, g := range strings.Split(f[2], ",") {
				if g == "" {
					return nil, fmt.Errorf("line %d: empty group name in %q", n, f[2])
				}
				e.groups = append(e.groups, g)
			}
		}
		t.entries = append(t.entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return t, nil
}

// checkName refuses names that cannot identify a caller.
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty name")
	case name == Anonymous:
		return fmt.Errorf("%q is the name of unauthenticated callers", Anonymous)
	case strings.IndexFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		return fmt.Errorf("name with a control character")
	}
	return nil
}

// LoadTokens reads the token file at path.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := ParseTokens(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Lookup returns the principal of token, if the file lists it. The
// token's hash is compared with every entry in constant time, whether or
// not an earlier one matched.
func (t *Tokens) Lookup(token string) (Principal, bool) {
	sum := sha256.Sum256([]byte(token))
	found := -1
	for i := range t.entries {
		if subtle.ConstantTimeCompare(sum[:], t.entries[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, false
	}
	e := t.entries[found]
	return Principal{Name: e.user, Groups: append([]string(nil), e.groups...), Method: "token"}, true
}

// DefaultReloadInterval is how often a TokenWatcher looks at its file.
const DefaultReloadInterval = 2 * time.Second

// TokenWatcher holds the tokens of a file and reloads them when the file
// changes. A new version that does not parse, or a file gone, is logged
// and the tokens in force are kept (an empty file is valid: it revokes
// every token).
type TokenWatcher struct{ *filewatch.File[Tokens] }

// NewTokenWatcher loads the token file at path; an invalid file is an
// error.
func NewTokenWatcher(path string, logger *slog.Logger) (*TokenWatcher, error) {
	f, err := filewatch.New(path, "token file", LoadTokens, logger)
	if err != nil {
		return nil, err
	}
	return &TokenWatcher{f}, nil
}

// Tokens returns the tokens in force.
func (w *TokenWatcher) Tokens() *Tokens { return w.Current() }
