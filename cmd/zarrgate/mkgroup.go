package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/zarrgate/zarrgate/client"
)

const mkgroupUsage = `usage: zarrgate mkgroup PATH [--attrs JSON] [--format v3|v2|nczarr|nczarr-4.9]
                        [--dims NAME=SIZE,...] [--addr ADDR]

Create a group at PATH (a/b/c; / for the root), with the groups missing
above it, the root included, in the same format, as zarr-python does. A
group already above it is left as it is; a node already at PATH, or an
array above it, is an error.

NCZarr (netCDF's Zarr) comes in two forms: --format nczarr writes the
lower-case keys netCDF-C 4.10 reads, --format nczarr-4.9 the upper-case
ones netCDF-C 4.9.0 reads (neither reads the other's). Groups and arrays
made inside an NCZarr group take its form whichever of the two they ask
for. --dims declares netCDF dimensions in the group (NAME=unlimited for
an unlimited one, nczarr only) for its arrays to name in mkarray --dims.

Examples:
  zarrgate mkgroup climate --attrs '{"title": "ERA5 subset"}'
  zarrgate mkgroup model/run1 --format nczarr
  zarrgate mkgroup / --format nczarr-4.9 --dims time=365,lat=72,lon=144

Flags:
`

func runMkgroup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("mkgroup", stderr)
	addr := addrFlag(fs)
	attrs := fs.String("attrs", "", "attributes as a `JSON` object")
	format := fs.String("format", "v3", "v3, v2, nczarr or nczarr-4.9; missing parents are made in it too")
	dims := fs.String("dims", "", "NCZarr dimensions to declare, e.g. time=365,lat=72 (NAME=unlimited for an unlimited one)")
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
	var opts []client.GroupOption
	switch *format {
	case "v3":
		f = client.FormatV3
	case "v2":
		f = client.FormatV2
	case "nczarr":
		f = client.FormatNCZarr
	case "nczarr-4.9":
		f = client.FormatNCZarr
		opts = append(opts, client.WithNCZarrLegacy())
	default:
		return usageError{fmt.Errorf("--format %q: want v3, v2, nczarr or nczarr-4.9", *format)}
	}
	if *dims != "" {
		d, err := parseDims(*dims)
		if err != nil {
			return usageError{fmt.Errorf("--dims %q: %v", *dims, err)}
		}
		if f != client.FormatNCZarr {
			return usageError{fmt.Errorf("--dims: dimensions are an NCZarr feature; add --format nczarr or nczarr-4.9")}
		}
		opts = append(opts, client.WithDimensions(d...))
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	g, err := c.CreateGroup(ctx, path, f, *attrs, opts...)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "created group /%s (%s)\n", g.Path, *format)
	return nil
}

// parseDims parses NAME=SIZE,... (SIZE a non-negative integer or
// "unlimited").
func parseDims(s string) ([]client.Dimension, error) {
	var out []client.Dimension
	for _, item := range strings.Split(s, ",") {
		name, size, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want NAME=SIZE", item)
		}
		if size == "unlimited" {
			out = append(out, client.Dimension{Name: name, Unlimited: true})
			continue
		}
		n, err := strconv.ParseInt(size, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q: the size must be a non-negative integer or unlimited", item)
		}
		out = append(out, client.Dimension{Name: name, Size: n})
	}
	return out, nil
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
