package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/zarrgate/zarrgate/client"
)

const mkgroupUsage = `usage: zarrgate mkgroup PATH [--attrs JSON] [--format v3|v2|nczarr] [--addr ADDR]

Create a group at PATH (a/b/c; / for the root), with the groups missing
above it, the root included, in the same format, as zarr-python does. A
group already above it is left as it is; a node already at PATH, or an
array above it, is an error.

Examples:
  zarrgate mkgroup climate --attrs '{"title": "ERA5 subset"}'
  zarrgate mkgroup model/run1 --format nczarr

Flags:
`

func runMkgroup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("mkgroup", stderr)
	addr := addrFlag(fs)
	attrs := fs.String("attrs", "", "attributes as a `JSON` object")
	format := fs.String("format", "v3", "v3, v2 or nczarr; missing parents are made in it too")
	// Help is output the user asked for: stdout, so that it pages. Parse
	// errors go to stderr through run, with a pointer to the help.
	fs.SetOutput(io.Discard)
	path, err := parseWithPath(fs, args, false)
	if errors.Is(err, flag.ErrHelp) {
		printMkgroupHelp(stdout, fs)
		return err
	}
	if err != nil {
		return usageError{fmt.Errorf("%v (see zarrgate mkgroup --help)", err)}
	}
	var f client.Format
	switch *format {
	case "v3":
		f = client.FormatV3
	case "v2":
		f = client.FormatV2
	case "nczarr":
		f = client.FormatNCZarr
	default:
		return usageError{fmt.Errorf("--format %q: want v3, v2 or nczarr", *format)}
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	g, err := c.CreateGroup(ctx, path, f, *attrs)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "created group /%s (%s)\n", g.Path, *format)
	return nil
}

// printMkgroupHelp prints the synopsis and the flags, written --flag as
// the docs write them.
func printMkgroupHelp(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, mkgroupUsage)
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		name := "--" + f.Name
		if arg == "string" { // unnamed: name it after the flag
			arg = f.Name
		}
		if arg != "" {
			name += " " + strings.ToUpper(arg)
		}
		line := fmt.Sprintf("  %-20s %s", name, usage)
		if f.DefValue != "" && f.DefValue != "0s" {
			line += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintln(w, line)
	})
}
