// Authorization and audit flags of every serving command: --policy and
// --audit-log (internal/authz, docs/security.md).

package main

import (
	"flag"
	"io"

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

// config returns the authorization and audit the flags ask for (nothing
// without --policy and --audit-log).
func (a authzFlags) config() security.Authorization {
	return security.Authorization{PolicyFile: *a.policy, AuditLog: *a.auditLog, Stderr: *a.stderr}
}
