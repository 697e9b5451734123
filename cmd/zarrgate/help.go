// Help: the list of commands, and each command's usage and flags.

package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// commandHelp is what a command's help says besides its summary and
// flags: the synopsis's operands and, for some, more.
var commandHelp = map[string]struct{ synopsis, details string }{
	"ls":      {"[flags] [PATH]", ""},
	"info":    {"[flags] [PATH]", ""},
	"cat":     {"[flags] PATH [SELECTION]", catHelp},
	"get":     {"[flags] KEY", ""},
	"put":     {"[flags] KEY", ""},
	"rm":      {"[flags] KEY", ""},
	"mkarray": {"[flags] --shape N[,N...] PATH", ""},
	"mkgroup": {"[flags] PATH", ""},
	"cp":      {"[flags] SRC DST", "SRC and DST are each grpc://HOST:PORT (a zarrgate server; --tls-ca and the other TLS flags apply to it), a store URL or a directory."},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: zarrgate <command> [flags] [arguments]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-14s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run 'zarrgate help <command>' (or 'zarrgate <command> --help') for a
command's flags; 'zarrgate --version' for the version.
`+envHelp)
}

// envHelp explains the flags' environment variables.
const envHelp = `
Every flag can also be set by an environment variable: ZARRGATE_ and the
flag's name in capitals, dashes as underscores (--addr: ZARRGATE_ADDR,
--max-slab-bytes: ZARRGATE_MAX_SLAB_BYTES), or in a YAML file given with
--config (or ZARRGATE_CONFIG), keys named as the flags ("memory-limit: 2GiB";
an unknown or repeated key is an error). An empty variable counts as unset.
The command line wins over the environment, the environment over the file.
`

// commandUsage prints a command's help: synopsis, summary, details and
// flags written as the docs write them (--listen, not Go's -listen).
func commandUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	h := commandHelp[c.name]
	if h.synopsis == "" {
		h.synopsis = "[flags]"
	}
	fmt.Fprintf(w, "usage: zarrgate %s %s\n\n%s.\n", c.name, h.synopsis, capitalize(c.summary))
	if h.details != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(h.details))
	}
	if fs == nil {
		return
	}
	fmt.Fprintln(w, "\nflags:")
	fs.VisitAll(func(f *flag.Flag) {
		typ, text := flag.UnquoteUsage(f)
		if _, ok := f.Value.(*sizeValue); ok {
			typ = "size"
		}
		line := "  --" + f.Name
		if len(f.Name) == 1 {
			line = "  -" + f.Name // one letter: -o, as is usual
		}
		if typ != "" {
			line += " " + typ
		}
		if !isZeroDefault(f) {
			def := f.DefValue
			if typ == "string" {
				def = strconv.Quote(def)
			}
			text += fmt.Sprintf(" (default %s)", def)
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(text, "\n", "\n    \t"))
	})
	fmt.Fprint(w, envHelp)
}

// isZeroDefault reports whether a flag's default is its type's zero value,
// which the help leaves unsaid.
func isZeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return true
	}
	return false
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// dashes writes the flag names in the flag package's errors as users
// write them: "flag provided but not defined: --x", not "-x".
func dashes(err error) string {
	msg := err.Error()
	for _, p := range []string{"not defined: -", "for flag -", "needs an argument: -"} {
		if i := strings.Index(msg, p); i >= 0 && !strings.HasPrefix(msg[i+len(p):], "-") {
			msg = msg[:i+len(p)] + "-" + msg[i+len(p):]
		}
	}
	return msg
}
