// Command zarrgate is the zarrgate server and tool: one binary, components
// as subcommands.
//
//	zarrgate serve [--root DIR] [--listen ADDR]   the embedded gateway over a store
//	zarrgate help COMMAND                         a command's flags
//	zarrgate --version                            version and VCS revision
//
// Every flag can also come from $ZARRGATE_<FLAG> (--max-slab-bytes:
// $ZARRGATE_MAX_SLAB_BYTES); the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/zarrgate/zarrgate/errs"
)

// command is a subcommand. Its run must parse its flags (made with
// newFlags) before doing anything else and return flag.ErrHelp for
// --help: run learns a command's flags that way (flagsOf).
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"serve", "serve a store: the gateway (ArrayService) and StoreService over gRPC", runServe},
	{"gateway", "serve the gateway over pools of store and codec workers", runGateway},
	{"store-worker", "serve StoreService over a store (the storage tier)", runStoreWorker},
	{"codec-worker", "serve CodecService (the codec tier)", runCodecWorker},
	{"ls", "list the children of a group (-r: all descendants)", runLs},
	{"info", "show a node's metadata, dimensions, codecs and stored bytes", runInfo},
	{"cat", "print a selection of an array as text, CSV or .npy", runCat},
	{"get", "write a raw key's value to stdout or a file", runGet},
	{"put", "store stdin or a file under a raw key", runPut},
	{"rm", "remove a raw key (-r: a prefix)", runRm},
	{"mkarray", "create an array", runMkarray},
	{"mkgroup", "create a group (and the groups missing above it)", runMkgroup},
	{"cp", "copy every key between two stores (servers or local), resumably", runCp},
}

var flagErrHelp = flag.ErrHelp

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one subcommand and returns the process exit code: 0 on
// success, 2 for usage errors, 1 for everything else. Help asked for goes
// to stdout (so it pages and greps); help after a mistake to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "help":
		if len(args) == 1 {
			usage(stdout)
			return 0
		}
		c := findCommand(args[1])
		if c == nil || len(args) > 2 {
			fmt.Fprintf(stderr, "zarrgate help: want one command name, got %q\n\n", args[1:])
			usage(stderr)
			return 2
		}
		commandUsage(stdout, c, flagsOf(ctx, c))
		return 0
	case "-version", "--version", "version":
		fmt.Fprintln(stdout, versionString())
		return 0
	}
	c := findCommand(args[0])
	if c == nil {
		fmt.Fprintf(stderr, "zarrgate: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	fs := flagsOf(ctx, c)
	env, err := envArgs(fs)
	if err != nil {
		fmt.Fprintf(stderr, "zarrgate %s: %v\nRun 'zarrgate help %s' for usage.\n", c.name, err, c.name)
		return 2
	}
	var timeout time.Duration // a client command's --timeout, noted by withTimeout
	// The environment's flags go first: a flag given again on the command
	// line overrides them.
	err = c.run(context.WithValue(ctx, timeoutKey{}, &timeout), append(env, args[1:]...), stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		commandUsage(stdout, c, fs)
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "zarrgate %s: %v\nRun 'zarrgate help %s' for usage.\n", c.name, dashes(err), c.name)
		return 2
	case timeout > 0 && (errors.Is(err, context.DeadlineExceeded) || errs.Code(err) == codes.DeadlineExceeded):
		fmt.Fprintf(stderr, "zarrgate %s: timed out: did not finish within --timeout %v (%v)\n", c.name, timeout, err)
		return 1
	}
	fmt.Fprintf(stderr, "zarrgate %s: %v\n", c.name, err)
	return 1
}

func findCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

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
	"cp":      {"[flags] SRC DST", "SRC and DST are each grpc://HOST:PORT (a zarrgate server), a store URL or a directory."},
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
--max-slab-bytes: ZARRGATE_MAX_SLAB_BYTES). An empty variable counts as
unset; the command line wins over the environment.
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

// versionString is the module version and VCS revision the binary was
// built from, as the Go toolchain recorded them.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "zarrgate (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	out := "zarrgate " + v
	if rev != "" {
		out += " revision " + rev
		if modified {
			out += " (modified)"
		}
		if at != "" {
			out += " of " + at
		}
	}
	return out + ", " + bi.GoVersion
}

// usageError is a mistake in the command line.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

var (
	flagSetsMu sync.Mutex
	flagSets   = map[string]*flag.FlagSet{} // the last flag set newFlags made per command
)

// newFlags returns a flag set that reports errors instead of exiting or
// printing: run prints them, and the help, itself.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("zarrgate "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	flagSetsMu.Lock()
	flagSets[name] = fs
	flagSetsMu.Unlock()
	return fs
}

// flagsOf returns the flags a command defines. Commands define and parse
// their flags in their own ways (cp parses flags between its operands),
// so run learns them by asking the command for its help: every command
// parses its flags before doing anything else, and stops at --help. This
// gives one place for help and environment variables for every command.
func flagsOf(ctx context.Context, c *command) *flag.FlagSet {
	flagSetsMu.Lock()
	delete(flagSets, c.name)
	flagSetsMu.Unlock()
	if err := c.run(ctx, []string{"--help"}, io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
		return nil
	}
	flagSetsMu.Lock()
	defer flagSetsMu.Unlock()
	return flagSets[c.name]
}

// envName is the environment variable of a flag: ZARRGATE_MAX_SLAB_BYTES
// for --max-slab-bytes.
func envName(flagName string) string {
	return "ZARRGATE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// envArgs returns the flags set in the environment as command-line
// arguments (--name=value), after checking each value on fs: a bad one is
// a usage error naming the variable. An empty variable is unset.
func envArgs(fs *flag.FlagSet) ([]string, error) {
	if fs == nil {
		return nil, nil
	}
	var out []string
	var bad error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		v := os.Getenv(name)
		if v == "" || bad != nil {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			want, _ := flag.UnquoteUsage(f)
			if want == "" {
				want = "true or false"
			}
			bad = usageError{fmt.Errorf("environment variable %s=%q (for --%s): want a %s: %v", name, v, f.Name, want, err)}
			return
		}
		out = append(out, "--"+f.Name+"="+v)
	})
	return out, bad
}

// parseFlags parses a command's flags; it takes no operands. Then it runs
// the checks the flags' helpers registered with afterParse.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %q", fs.Args())}
	}
	flagSetsMu.Lock()
	checks := flagChecks[fs]
	delete(flagChecks, fs)
	flagSetsMu.Unlock()
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// flagChecks are the checks of flag values that depend on each other
// (such as --root and --create), run by parseFlags once all are parsed.
var flagChecks = map[*flag.FlagSet][]func() error{}

// afterParse has parseFlags run check once fs is parsed.
func afterParse(fs *flag.FlagSet, check func() error) {
	flagSetsMu.Lock()
	defer flagSetsMu.Unlock()
	flagChecks[fs] = append(flagChecks[fs], check)
}
