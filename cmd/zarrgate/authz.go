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

// serverOptions returns the authorization and audit interceptors the flags
// ask for (none without --policy and --audit-log), and what releases them.
// An invalid policy file fails here, at start-up.
func (a authzFlags) serverOptions(ctx context.Context, logger *slog.Logger) ([]grpc.ServerOption, func(), error) {
	if *a.policy == "" && *a.auditLog == "" {
		return nil, func() {}, nil
	}
	var c authzgrpc.Config
	closeAudit := func() error { return nil }
	if *a.auditLog != "" {
		w, cl, err := authz.OpenAuditLog(*a.auditLog, *a.stderr)
		if err != nil {
			return nil, nil, err
		}
		c.Audit, closeAudit = authz.NewAuditor(w), cl
	}
	if *a.policy != "" {
		w, err := authz.NewWatcher(*a.policy, logger)
		if err != nil {
			closeAudit()
			return nil, nil, fmt.Errorf("--policy: %w", err)
		}
		c.Policy = w.Policy
		go w.Run(ctx, authz.DefaultReloadInterval)
		logger.Info("authorization policy in force", "policy", *a.policy)
	}
	return authzgrpc.ServerOptions(c), func() { closeAudit() }, nil
}
