// Authorization and audit flags of every serving command: --policy and
// --audit-log (internal/authz, docs/security.md).

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"google.golang.org/grpc"

	"github.com/zarrgate/zarrgate/internal/authz"
	"github.com/zarrgate/zarrgate/internal/authz/authzgrpc"
)

type authzFlags struct {
	policy, auditLog *string
	stderr           *io.Writer // where "--audit-log -" writes: the command's stderr, set by serverFlags.logger
}

func addAuthzFlags(fs *flag.FlagSet) authzFlags {
	return authzFlags{
		policy:   fs.String("policy", "", "authorization policy file (YAML or JSON, see docs/security.md): who may read, write, delete or administer which key prefixes; reloaded when it changes (an invalid new version is logged and the old one kept). Default: no authorization"),
		auditLog: fs.String("audit-log", "", "append an audit record (a JSON line: principal, method, keys or prefix, result) of every write, delete and denied call to this file; - for stderr (records carry logger=zarrgate.audit). Default: none"),
		stderr:   new(io.Writer),
	}
}

// authzSetup is what --policy and --audit-log made: the interceptors'
// configuration, still without what authentication tells them.
type authzSetup struct {
	c       authzgrpc.Config
	enabled bool
	release func()
}

// load opens the audit log and reads the policy (none without --policy
// and --audit-log). An invalid policy file fails here, at start-up.
func (a authzFlags) load(ctx context.Context, logger *slog.Logger) (*authzSetup, error) {
	s := &authzSetup{release: func() {}}
	if *a.policy == "" && *a.auditLog == "" {
		return s, nil
	}
	s.enabled = true
	closeAudit := func() error { return nil }
	if *a.auditLog != "" {
		w, cl, err := authz.OpenAuditLog(*a.auditLog, *a.stderr)
		if err != nil {
			return nil, err
		}
		s.c.Audit, closeAudit = authz.NewAuditor(w), cl
	}
	if *a.policy != "" {
		w, err := authz.NewWatcher(*a.policy, logger)
		if err != nil {
			closeAudit()
			return nil, fmt.Errorf("--policy: %w", err)
		}
		s.c.Policy = w.Policy
		go w.Run(ctx, authz.DefaultReloadInterval)
		logger.Info("authorization policy in force", "policy", *a.policy)
	}
	s.release = func() { closeAudit() }
	return s, nil
}

// grantsAnonymous reports whether the policy in force grants the anonymous
// principal anything (false without a policy), for the authenticator:
// with such a policy, callers without credentials are let in and the
// policy decides what they may do.
func (s *authzSetup) grantsAnonymous() func() bool {
	if s.c.Policy == nil {
		return nil
	}
	return func() bool {
		pol := s.c.Policy()
		return pol != nil && pol.GrantsAnonymous()
	}
}

// serverOptions returns the authorization and audit interceptors (none
// without --policy and --audit-log); credentials names what the server's
// authentication accepts ("" without authentication), for the refusals
// of callers that presented none.
func (s *authzSetup) serverOptions(credentials string) []grpc.ServerOption {
	if !s.enabled {
		return nil
	}
	c := s.c
	c.Credentials = credentials
	return authzgrpc.ServerOptions(c)
}
