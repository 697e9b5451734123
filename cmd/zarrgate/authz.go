// Authorization and audit flags of every serving command: --policy and
// --audit-log (internal/authz, docs/security.md).

package main

import (
	"context"
	"flag"
	"io"
	"log/slog"

	"google.golang.org/grpc"

	"github.com/zarrgate/zarrgate/internal/security"
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
	return security.Authorization{PolicyFile: *a.policy, AuditLog: *a.auditLog, Stderr: *a.stderr}.ServerOptions(ctx, logger)
}
