// Command zarrgate is the zarrgate server and tool: one binary, components
// as subcommands.
//
//	zarrgate serve [--root DIR] [--listen ADDR]   the embedded gateway over a store
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/zarrgate/zarrgate/errs"
)

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
// success, 2 for usage errors, 1 for everything else.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			var timeout time.Duration // a client command's --timeout, noted by withTimeout
			err := c.run(context.WithValue(ctx, timeoutKey{}, &timeout), args[1:], stdout, stderr)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.As(err, new(usageError)):
				fmt.Fprintf(stderr, "zarrgate %s: %v\n", c.name, err)
				return 2
			case timeout > 0 && (errors.Is(err, context.DeadlineExceeded) || errs.Code(err) == codes.DeadlineExceeded):
				fmt.Fprintf(stderr, "zarrgate %s: timed out: did not finish within --timeout %v (%v)\n", c.name, timeout, err)
				return 1
			}
			fmt.Fprintf(stderr, "zarrgate %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "zarrgate: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: zarrgate <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-14s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'zarrgate <command> -h' for a command's flags.")
}

// usageError is a mistake in the command line.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("zarrgate "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

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
	return nil
}
