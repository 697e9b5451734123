// Command zarrgate is the zarrgate server and tool: one binary, components
// as subcommands.
//
//	zarrgate serve [--root DIR] [--listen ADDR]   the embedded gateway over a store
//	zarrgate help COMMAND                         a command's flags
//	zarrgate --version                            version and VCS revision
//
// Every flag can also come from $ZARRGATE_<FLAG> (--max-slab-bytes:
// $ZARRGATE_MAX_SLAB_BYTES) or a --config YAML file; the command line wins
// over the environment, the environment over the file.
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
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/zarrgate/zarrgate/codecsvc"
	"github.com/zarrgate/zarrgate/internal/grpcerr"
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
	{"token", "make a bearer token for a --tokens file: token new --user NAME", runToken},
}

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
	// The --config file's flags go first, then the environment's: a flag
	// given again later overrides them, so the command line wins.
	full, sources, err := assembleArgs(fs, args[1:])
	if err != nil {
		fmt.Fprintf(stderr, "zarrgate %s: %v\nRun 'zarrgate help %s' for usage.\n", c.name, err, c.name)
		return 2
	}
	var timeout time.Duration // a client command's --timeout, noted by withTimeout
	ctx = context.WithValue(context.WithValue(ctx, timeoutKey{}, &timeout), sourcesKey{}, sources)
	err = c.run(ctx, full, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		commandUsage(stdout, c, fs)
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "zarrgate %s: %v\nRun 'zarrgate help %s' for usage.\n", c.name, dashes(err), c.name)
		return 2
	case timeout > 0 && (errors.Is(err, context.DeadlineExceeded) || grpcerr.Code(err) == codes.DeadlineExceeded):
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

// version and revision, when set at link time (go build -ldflags "-X
// main.version=v1.2.3 -X main.revision=abc123", as the Dockerfile does),
// replace what the Go toolchain recorded: a build without the .git
// directory (a container image's build context) records no VCS
// information, and go install's module version is better than none.
var version, revision string

// build is what the binary says it is: the module version and VCS
// revision it was built from, as the Go toolchain recorded them or
// -ldflags set them, and its Go version.
type build struct {
	version, revision, at, goVersion string
	modified                         bool
}

func buildOf() build {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = &debug.BuildInfo{GoVersion: "unknown Go"}
	}
	b := build{version: bi.Main.Version, revision: revision, goVersion: bi.GoVersion}
	if version != "" {
		b.version = version
	}
	if b.version == "" {
		b.version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if b.revision == "" {
				b.revision = s.Value
			}
		case "vcs.time":
			b.at = s.Value
		case "vcs.modified":
			b.modified = s.Value == "true"
		}
	}
	return b
}

// versionString is the build's version and revision, its Go version, and
// what does its codec work: "codecs: pure Go" or, for the cgocodecs
// build, the C libraries and their versions.
func versionString() string {
	b := buildOf()
	out := "zarrgate " + b.version
	if b.revision != "" {
		out += " revision " + b.revision
		if b.modified {
			out += " (modified)"
		}
		if b.at != "" {
			out += " of " + b.at
		}
	}
	return out + ", " + b.goVersion + ", codecs: " + codecsvc.Libraries()
}
