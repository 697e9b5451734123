package authz

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/auth"
)

// AuditLoggerName is the "logger" attribute of every audit record, which
// tells them apart from the access log when both go to stderr.
const AuditLoggerName = "zarrgate.audit"

// maxAuditKeys is how many keys one record lists; keys_total counts all.
const maxAuditKeys = 64

// Auditor writes the audit log: one JSON line per write, delete or denied
// call, separate from the access log.
type Auditor struct {
	l *slog.Logger
}

// NewAuditor returns an auditor writing JSON lines to w.
func NewAuditor(w io.Writer) *Auditor {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})
	return &Auditor{l: slog.New(h).With("logger", AuditLoggerName)}
}

// OpenAuditLog opens the audit log's destination: "-" is stderr (records
// carry logger=zarrgate.audit), anything else a file appended to, created
// with mode 0600. close releases it.
func OpenAuditLog(path string, stderr io.Writer) (w io.Writer, close func() error, err error) {
	if path == "-" {
		if stderr == nil {
			stderr = os.Stderr
		}
		return stderr, func() error { return nil }, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, errs.Wrap(errs.InvalidArgument, err, "--audit-log")
	}
	return f, f.Close, nil
}

// Record is one audited call.
type Record struct {
	Principal auth.Principal
	// Method is the gRPC method, "/package.Service/Method".
	Method string
	// Perm is the permission the call needed (0 when none was decided,
	// as for a request that was invalid before any check).
	Perm Perm
	// Keys are the keys or node paths the call named; Prefix the prefix
	// of a prefix-wide call (erase, listing).
	Keys   []string
	Prefix *string
	// Denied is set when the policy refused the call.
	Denied bool
	// Code is the call's result ("OK", "PermissionDenied"...), Error its
	// message when it failed.
	Code  string
	Error string
}

// Log writes r.
func (a *Auditor) Log(ctx context.Context, r Record) {
	if a == nil {
		return
	}
	attrs := []slog.Attr{
		slog.String("principal", PrincipalString(r.Principal)),
		slog.String("auth", r.Principal.Method),
		slog.String("method", r.Method),
	}
	if len(r.Principal.Groups) > 0 {
		attrs = append(attrs, slog.Any("groups", r.Principal.Groups))
	}
	if r.Perm != 0 {
		attrs = append(attrs, slog.String("permission", r.Perm.String()))
	}
	if len(r.Keys) > 0 {
		keys := r.Keys
		if len(keys) > maxAuditKeys {
			keys = keys[:maxAuditKeys]
		}
		attrs = append(attrs, slog.Any("keys", keys), slog.Int("keys_total", len(r.Keys)))
	}
	if r.Prefix != nil {
		attrs = append(attrs, slog.String("prefix", *r.Prefix))
	}
	attrs = append(attrs, slog.Bool("denied", r.Denied), slog.String("code", r.Code))
	if r.Error != "" {
		attrs = append(attrs, slog.String("error", r.Error))
	}
	level := slog.LevelInfo
	if r.Denied {
		level = slog.LevelWarn
	}
	a.l.LogAttrs(context.WithoutCancel(ctx), level, "audit", attrs...)
}

// PrincipalString is how messages and the audit log name p:
// "user:NAME" or "anonymous".
func PrincipalString(p auth.Principal) string {
	if IsAnonymous(p) {
		return auth.Anonymous
	}
	return userPrefix + p.Name
}
