// Flag plumbing every command shares: flag sets, operands among flags,
// $ZARRGATE_* variables, usage errors and size flags.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/zarrgate/zarrgate/internal/membudget"
)

var flagErrHelp = flag.ErrHelp

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
	fs.String(configFlagName, "", configUsage) // read by run (assembleArgs), before the command parses
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
			bad = usageError{fmt.Errorf("environment variable %s=%q (for --%s): want a %s: %v", name, v, f.Name, flagType(f), err)}
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

// parseWithPath parses flags and one optional (or required) positional
// path. Flags may follow the path.
func parseWithPath(fs *flag.FlagSet, args []string, optional bool) (string, error) {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return "", err
	}
	switch {
	case len(pos) > 1:
		return "", usageError{fmt.Errorf("unexpected arguments: %q", pos[1:])}
	case len(pos) == 0 && !optional:
		return "", usageError{errors.New("missing PATH")}
	case len(pos) == 0:
		return "", nil
	}
	return strings.Trim(pos[0], "/"), nil
}

// parseInterspersed parses flags anywhere among the operands and returns
// the operands. Unlike the flag package it takes "-1" or "-3:" for an
// operand (a selection counting from the end: no flag name starts with a
// digit); "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		a := args[0]
		switch {
		case a == "--":
			return append(pos, args[1:]...), nil
		case len(a) < 2 || a[0] != '-' || strings.ContainsRune("0123456789.:", rune(a[1])):
			pos, args = append(pos, a), args[1:]
			continue
		}
		// One flag, with its value when it takes one and has no "=".
		n := 1
		name := strings.TrimLeft(a, "-")
		if f := fs.Lookup(name); f != nil && !strings.Contains(name, "=") {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
				n = min(2, len(args))
			}
		}
		if err := fs.Parse(args[:n]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err}
		}
		args = args[n:]
	}
	return pos, nil
}

// sizeValue is a flag holding a byte count: 1048576, 1MiB, 2G.
type sizeValue int64

func (v *sizeValue) String() string { return strconv.FormatInt(int64(*v), 10) }

func (v *sizeValue) Set(s string) error {
	n, err := membudget.ParseSize(s)
	if err != nil {
		return err
	}
	*v = sizeValue(n)
	return nil
}

func sizeFlag(fs *flag.FlagSet, name string, def int64, usage string) *int64 {
	v := sizeValue(def)
	fs.Var(&v, name, usage+" (bytes; K, M, G, T suffixes)")
	return (*int64)(&v)
}
