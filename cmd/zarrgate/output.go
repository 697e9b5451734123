package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/x448/float16"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
)

// serverOpts are the flags every client command takes: where the gateway
// is, and how long the command may take.
type serverOpts struct {
	addr    *string
	timeout *time.Duration
}

// addrFlag adds the --addr and --timeout flags every client command takes.
func addrFlag(fs *flag.FlagSet) serverOpts {
	return serverOpts{
		addr:    fs.String("addr", DefaultListen, "gateway address: host:port (a host alone: port "+defaultPort+"), unix:///path/to.sock or a gRPC target such as dns:///name:port"),
		timeout: fs.Duration("timeout", 0, "give up after this long (e.g. 30s, 5m); 0: no limit"),
	}
}

// withTimeout bounds ctx by d (none for 0), and tells run the limit, for
// its message if the command runs past it.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return ctx, func() {}
	}
	if p, ok := ctx.Value(timeoutKey{}).(*time.Duration); ok {
		*p = d
	}
	return context.WithTimeout(ctx, d)
}

// timeoutKey holds, in the context run gives a command, where the command
// notes its --timeout.
type timeoutKey struct{}

// cliClient is a client whose Close also releases the command's deadline.
type cliClient struct {
	*client.Client
	cancel context.CancelFunc
}

func (c cliClient) Close() error {
	c.cancel()
	return c.Client.Close()
}

// dial connects to --addr and returns the context the command runs in,
// bounded by --timeout: the deadline goes with every call to the gateway,
// which stops working on them when it passes.
func dial(ctx context.Context, o serverOpts) (context.Context, cliClient, error) {
	ctx, cancel := withTimeout(ctx, *o.timeout)
	c, err := client.Dial(ctx, withDefaultPort(*o.addr))
	if err != nil {
		cancel()
		return ctx, cliClient{}, err
	}
	return ctx, cliClient{Client: c, cancel: cancel}, nil
}

// defaultPort is the port of DefaultListen, which clients dial when
// --addr names only a host.
const defaultPort = "50051"

// withDefaultPort adds defaultPort to an address that is a bare host
// ("localhost", "10.0.0.5", "::1"): gRPC would dial port 443 for it, which
// no zarrgate listens on by default. Targets with a scheme (unix:,
// dns:///) and addresses with a port are left alone.
func withDefaultPort(addr string) string {
	if addr == "" || strings.Contains(addr, "/") || strings.HasPrefix(addr, "unix:") {
		return addr
	}
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	host := strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		return addr // host:port with a bad port, or a scheme gRPC resolves: its error is clearer
	}
	return net.JoinHostPort(host, defaultPort)
}

func runLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("ls", stderr)
	addr := addrFlag(fs)
	recursive := fs.Bool("r", false, "list every descendant")
	path, err := parseWithPath(fs, args, true)
	if err != nil {
		return err
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	nodes, err := c.List(ctx, path, *recursive)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	for _, n := range nodes {
		if n.IsArray {
			fmt.Fprintf(w, "%-40s array  %-10s %v\n", n.Path, n.DataType, n.Shape)
		} else {
			fmt.Fprintf(w, "%-40s group\n", n.Path)
		}
	}
	return nil
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

func runInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("info", stderr)
	addr := addrFlag(fs)
	asJSON := fs.Bool("json", false, "print as JSON")
	path, err := parseWithPath(fs, args, true)
	if err != nil {
		return err
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	n, err := c.GetNode(ctx, path)
	if err != nil {
		return err
	}
	store, err := c.Store(ctx)
	if err != nil {
		return err
	}
	stored, count, err := storedBytes(ctx, store, path)
	if err != nil {
		return err
	}
	if *asJSON {
		out := map[string]any{"path": n.Path, "format": n.Format.String(), "array": n.IsArray, "attributes": n.Attributes,
			"stored_bytes": stored, "stored_keys": count}
		if n.IsArray {
			out["shape"], out["data_type"], out["chunk_shape"], out["shard_shape"] = n.Shape, n.DataType, n.ChunkShape, n.ShardShape
			out["codecs"], out["dimension_names"], out["fill_value"] = n.Codecs, n.DimensionNames, n.FillValue
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	kind := "group"
	if n.IsArray {
		kind = "array"
	}
	fmt.Fprintf(w, "path:        /%s\nkind:        %s\nformat:      %s\n", n.Path, kind, formatName(n.Format))
	if n.IsArray {
		fmt.Fprintf(w, "shape:       %v\ndata type:   %s\nchunks:      %v\n", n.Shape, n.DataType, n.ChunkShape)
		if n.ShardShape != nil {
			fmt.Fprintf(w, "shards:      %v\n", n.ShardShape)
		}
		if len(n.DimensionNames) > 0 {
			fmt.Fprintf(w, "dimensions:  %s\n", strings.Join(n.DimensionNames, ", "))
		}
		fmt.Fprintf(w, "fill value:  %s\ncodecs:      %s\n", n.FillValue, n.Codecs)
	}
	for _, d := range n.Dimensions {
		fmt.Fprintf(w, "dimension:   %s = %d%s\n", d.Name, d.Size, map[bool]string{true: " (unlimited)"}[d.Unlimited])
	}
	var compact bytes.Buffer
	if json.Compact(&compact, n.Attributes) == nil && compact.Len() > 2 {
		fmt.Fprintf(w, "attributes:  %s\n", compact.String())
	}
	fmt.Fprintf(w, "stored:      %s in %s\n", humanBytes(stored), countOf(count, "key"))
	return nil
}

// formatName is a storage format as users call it.
func formatName(f client.Format) string {
	switch f {
	case client.FormatV3:
		return "Zarr v3"
	case client.FormatV2:
		return "Zarr v2"
	case client.FormatNCZarr:
		return "NCZarr"
	}
	return strings.ToLower(strings.TrimPrefix(f.String(), "FORMAT_"))
}

// countOf is "1 key", "2 keys".
func countOf(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.FormatInt(n, 10) + " " + word + "s"
}

// storedBytes sums the sizes of the keys under a node's prefix.
func storedBytes(ctx context.Context, s *storesvc.Portable, path string) (int64, int64, error) {
	prefix := ""
	if path != "" {
		prefix = path + "/"
	}
	var keys []string
	for k, err := range s.ListPrefix(ctx, prefix) {
		if err != nil {
			return 0, 0, err
		}
		keys = append(keys, k)
	}
	sizes, err := sizesOf(ctx, s, keys)
	if err != nil {
		return 0, 0, err
	}
	var total int64
	for _, sz := range sizes {
		total += max(sz, 0)
	}
	return total, int64(len(keys)), nil
}

// sizesOf returns the size of each key (-1 if missing), 16 at a time.
func sizesOf(ctx context.Context, s storesvc.Store, keys []string) ([]int64, error) {
	out := make([]int64, len(keys))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, 16)
	for i, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			obj, err := s.Get(ctx, k, storesvc.Bounded(0, 0))
			if errors.Is(err, storesvc.ErrNotFound) {
				out[i] = -1
				return
			}
			if err != nil {
				mu.Lock()
				first = cmpErr(first, err)
				mu.Unlock()
				return
			}
			obj.Close()
			out[i] = obj.Size
		}()
	}
	wg.Wait()
	return out, first
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), 0
	for f >= unit && i < 5 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, "KMGTP"[i-1])
}

func runCat(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("cat", stderr)
	addr := addrFlag(fs)
	format := fs.String("format", "text", "output format: text, csv or npy")
	output := fs.String("o", "-", "output file (- for stdout)")
	all := fs.Bool("all", false, fmt.Sprintf("print a whole array of more than %s elements to stdout (without a SELECTION)", humanCount(catAllLimit)))
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usageError{errors.New("want PATH and an optional SELECTION such as 0:10,5:20:2")}
	}
	switch *format {
	case "text", "csv", "npy":
	default:
		return usageError{fmt.Errorf("--format %q: want text, csv or npy", *format)}
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	a, err := c.OpenArray(ctx, strings.Trim(pos[0], "/"))
	if err != nil {
		return err
	}
	var sel client.Selection
	if len(pos) == 2 {
		if sel, err = client.ParseSelection(pos[1], a.Shape); err != nil {
			return usageError{err}
		}
	} else if n := elements(a.Shape); n > catAllLimit && !*all && *output == "-" {
		return usageError{fmt.Errorf("/%s has %d elements (shape %v), more than the %s cat prints whole: give a SELECTION (such as 0:10 or ...,-1) or pass --all",
			a.Path, n, a.Shape, humanCount(catAllLimit))}
	}
	out := stdout
	if *output != "-" {
		f, err := os.Create(*output)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	return catArray(ctx, a, sel, *format, out)
}

// catAllLimit is the most elements cat prints to stdout without a
// selection or --all: a whole large array on a terminal is a mistake more
// often than not.
const catAllLimit = 1 << 20

// catHelp is cat's help beyond its flags.
const catHelp = `
SELECTION is NumPy's: one item per dimension, separated by commas:
  7          one element (-1: the last)
  2:10       elements 2 to 9; either bound may be left out or negative
  0:100:5    every 5th (steps are positive)
  :          the whole dimension
  ...        as many ':' as the dimensions not named
Dimensions after the last item are whole. Unlike NumPy, a bound past the
end is an error, not clipped.

Text output separates elements by spaces, rows by lines and planes by
blank lines; strings that are empty or hold spaces, quotes, backslashes or
control characters are quoted with Go's escapes ("a b", "tab\there").
CSV output is RFC 4180, as spreadsheets and csv readers expect.
Without a SELECTION, arrays of more than 1 Mi elements need --all (or -o).
`

func elements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// humanCount is a power-of-two element count as "1 Mi".
func humanCount(n int64) string {
	for _, u := range []struct {
		n    int64
		name string
	}{{1 << 30, "Gi"}, {1 << 20, "Mi"}, {1 << 10, "Ki"}} {
		if n >= u.n && n%u.n == 0 {
			return fmt.Sprintf("%d %s", n/u.n, u.name)
		}
	}
	return strconv.FormatInt(n, 10)
}

// catArray prints a slab. The slab is assembled in memory, as text and
// .npy output need it in order; use the client's Blocks for larger ones.
func catArray(ctx context.Context, a *client.Array, sel client.Selection, format string, out io.Writer) error {
	w := bufio.NewWriter(out)
	defer w.Flush()
	if a.DataType == "string" || a.DataType == "bytes" {
		vals, shape, err := client.ReadStrings(ctx, a, sel)
		if err != nil {
			return err
		}
		if format == "npy" {
			return errs.New(errs.Unimplemented, "cat: .npy output of variable-length strings is not supported; use text or csv")
		}
		return printRows(w, shape, format, func(i int64) string {
			if format == "text" {
				return textString(vals[i])
			}
			return vals[i] // the CSV writer quotes
		})
	}
	n := int64(1)
	for _, d := range sel.Shape(a.Shape) {
		n *= d
	}
	if n > 1<<30 {
		return errs.New(errs.ResourceExhausted, "cat: the slab %v is over a billion elements; select a part of it", sel.Shape(a.Shape))
	}
	hdr, buf, err := client.ReadBytes(ctx, a, sel)
	if err != nil {
		return err
	}
	if format == "npy" {
		return writeNpy(w, hdr, buf)
	}
	fmtElem, err := elementFormatter(hdr.DataType, hdr.ElementSize)
	if err != nil {
		return err
	}
	return printRows(w, hdr.Shape, format, func(i int64) string {
		return fmtElem(buf[i*int64(hdr.ElementSize) : (i+1)*int64(hdr.ElementSize)])
	})
}

// textString is a string as text output shows it: as it is when that is
// unambiguous, else quoted with Go's escapes, so that elements stay apart
// and an empty string is visible.
func textString(v string) string {
	if v == "" || v[0] == '"' {
		return strconv.Quote(v)
	}
	for _, r := range v {
		if r == '\\' || r == '"' || r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return strconv.Quote(v)
		}
	}
	return v
}

// printRows prints a C-order slab: one line per row of the last
// dimension, a blank line between 2-D planes (text), or CSV rows (RFC
// 4180: encoding/csv quotes what needs it).
func printRows(w io.Writer, shape []int64, format string, elem func(int64) string) error {
	var cw *csv.Writer
	writeRow := func(parts []string) error {
		_, err := fmt.Fprintln(w, strings.Join(parts, " "))
		return err
	}
	if format == "csv" {
		cw = csv.NewWriter(w)
		defer cw.Flush()
		writeRow = func(parts []string) error {
			if len(parts) == 1 && parts[0] == "" {
				// encoding/csv writes a lone empty field as an empty line,
				// which readers skip: quote it so the row stays.
				cw.Flush()
				_, err := io.WriteString(w, "\"\"\n")
				return err
			}
			return cw.Write(parts)
		}
	}
	if len(shape) == 0 {
		return writeRow([]string{elem(0)})
	}
	row := shape[len(shape)-1]
	total := int64(1)
	for _, s := range shape {
		total *= s
	}
	plane := row
	if len(shape) >= 2 {
		plane *= shape[len(shape)-2]
	}
	for i := int64(0); i < total; i += max(row, 1) {
		if format == "text" && i > 0 && len(shape) > 2 && i%plane == 0 {
			fmt.Fprintln(w)
		}
		parts := make([]string, row)
		for j := range row {
			parts[j] = elem(i + j)
		}
		if err := writeRow(parts); err != nil {
			return err
		}
		if row == 0 {
			break
		}
	}
	return nil
}

func elementFormatter(dtype string, size int) (func([]byte) string, error) {
	le := binary.LittleEndian
	ff := func(f float64, bits int) string { return strconv.FormatFloat(f, 'g', -1, bits) }
	switch dtype {
	case "bool":
		return func(b []byte) string { return strconv.FormatBool(b[0] != 0) }, nil
	case "int8":
		return func(b []byte) string { return strconv.FormatInt(int64(int8(b[0])), 10) }, nil
	case "int16":
		return func(b []byte) string { return strconv.FormatInt(int64(int16(le.Uint16(b))), 10) }, nil
	case "int32":
		return func(b []byte) string { return strconv.FormatInt(int64(int32(le.Uint32(b))), 10) }, nil
	case "int64":
		return func(b []byte) string { return strconv.FormatInt(int64(le.Uint64(b)), 10) }, nil
	case "uint8":
		return func(b []byte) string { return strconv.FormatUint(uint64(b[0]), 10) }, nil
	case "uint16":
		return func(b []byte) string { return strconv.FormatUint(uint64(le.Uint16(b)), 10) }, nil
	case "uint32":
		return func(b []byte) string { return strconv.FormatUint(uint64(le.Uint32(b)), 10) }, nil
	case "uint64":
		return func(b []byte) string { return strconv.FormatUint(le.Uint64(b), 10) }, nil
	case "float16":
		return func(b []byte) string { return ff(float64(float16.Frombits(le.Uint16(b)).Float32()), 32) }, nil
	case "float32":
		return func(b []byte) string { return ff(float64(math.Float32frombits(le.Uint32(b))), 32) }, nil
	case "float64":
		return func(b []byte) string { return ff(math.Float64frombits(le.Uint64(b)), 64) }, nil
	case "complex64":
		return func(b []byte) string {
			return strconv.FormatComplex(complex(float64(math.Float32frombits(le.Uint32(b))), float64(math.Float32frombits(le.Uint32(b[4:])))), 'g', -1, 64)
		}, nil
	case "complex128":
		return func(b []byte) string {
			return strconv.FormatComplex(complex(math.Float64frombits(le.Uint64(b)), math.Float64frombits(le.Uint64(b[8:]))), 'g', -1, 128)
		}, nil
	}
	return func(b []byte) string { return fmt.Sprintf("%x", b) }, nil // raw and fixed strings
}

var npyTypes = map[string]string{
	"bool": "|b1", "int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8", "uint8": "|u1", "uint16": "<u2",
	"uint32": "<u4", "uint64": "<u8", "float16": "<f2", "float32": "<f4", "float64": "<f8", "complex64": "<c8", "complex128": "<c16",
}

// writeNpy writes a NumPy .npy (format 1.0) file.
func writeNpy(w io.Writer, hdr *client.SlabHeader, data []byte) error {
	descr, ok := npyTypes[hdr.DataType]
	if !ok {
		descr = fmt.Sprintf("|V%d", hdr.ElementSize)
	}
	dims := make([]string, len(hdr.Shape))
	for i, s := range hdr.Shape {
		dims[i] = strconv.FormatInt(s, 10)
	}
	shape := strings.Join(dims, ", ")
	if len(dims) == 1 {
		shape += ","
	}
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape)
	pad := 64 - (10+len(header)+1)%64
	header += strings.Repeat(" ", pad%64) + "\n"
	var pre bytes.Buffer
	pre.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&pre, binary.LittleEndian, uint16(len(header)))
	pre.WriteString(header)
	if _, err := w.Write(pre.Bytes()); err != nil {
		return err
	}
	_, err := w.Write(data)
	return err
}

func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("get", stderr)
	addr := addrFlag(fs)
	output := fs.String("o", "-", "output file (- for stdout)")
	key, err := parseWithPath(fs, args, false)
	if err != nil {
		return err
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.Store(ctx)
	if err != nil {
		return err
	}
	obj, err := s.Get(ctx, key, storesvc.ByteRange{})
	if err != nil {
		return err
	}
	defer obj.Close()
	out := stdout
	if *output != "-" {
		f, err := os.Create(*output)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	_, err = io.Copy(out, obj)
	return err
}

func runPut(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("put", stderr)
	addr := addrFlag(fs)
	input := fs.String("i", "-", "input file (- for stdin)")
	ifAbsent := fs.Bool("if-absent", false, "only write if the key does not exist")
	verbose := fs.Bool("v", false, "print the key's new generation to stderr")
	key, err := parseWithPath(fs, args, false)
	if err != nil {
		return err
	}
	var in io.Reader = os.Stdin
	if *input != "-" {
		f, err := os.Open(*input)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.Store(ctx)
	if err != nil {
		return err
	}
	gen, err := s.Set(ctx, key, in, storesvc.Condition{IfAbsent: *ifAbsent})
	if err != nil {
		return err
	}
	if *verbose {
		fmt.Fprintf(stderr, "%s generation %s\n", key, gen)
	}
	return nil
}

func runRm(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("rm", stderr)
	addr := addrFlag(fs)
	recursive := fs.Bool("r", false, "remove a node or prefix and everything below it")
	key, err := parseWithPath(fs, args, false)
	if err != nil {
		return err
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.Store(ctx)
	if err != nil {
		return err
	}
	if *recursive {
		return s.ErasePrefix(ctx, key+"/")
	}
	if _, err := s.Get(ctx, key, storesvc.Bounded(0, 0)); err != nil {
		if errors.Is(err, storesvc.ErrNotFound) {
			return errs.New(errs.NotFound, "rm: key %q not found (use -r for a prefix)", key)
		}
		return err
	}
	return s.Erase(ctx, key, storesvc.Condition{})
}

func runMkarray(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("mkarray", stderr)
	addr := addrFlag(fs)
	shape := fs.String("shape", "", "shape, e.g. 1000,2000 (required)")
	dtype := fs.String("dtype", "float32", "data type (v3 name)")
	chunks := fs.String("chunks", "", "chunk shape (default: one chunk)")
	shards := fs.String("shards", "", "shard shape (v3 only; multiples of the chunk shape)")
	codecs := fs.String("codecs", "", `codec chain as v3 JSON (default bytes + zstd)`)
	fill := fs.String("fill", "", "fill value as v3 JSON (default 0)")
	dims := fs.String("dims", "", "dimension names, e.g. time,lat,lon")
	format := fs.String("format", "v3", "v3, v2 or nczarr")
	attrs := fs.String("attrs", "", "attributes as a JSON object")
	path, err := parseWithPath(fs, args, false)
	if err != nil {
		return err
	}
	spec := client.ArraySpec{DataType: *dtype, Codecs: *codecs, FillValue: *fill, Attributes: *attrs}
	if spec.Shape, err = parseInts(*shape); err != nil || *shape == "" {
		return usageError{fmt.Errorf("--shape %q: want comma-separated non-negative integers", *shape)}
	}
	if spec.ChunkShape, err = parseInts(*chunks); err != nil {
		return usageError{fmt.Errorf("--chunks %q: %v", *chunks, err)}
	}
	if spec.ShardShape, err = parseInts(*shards); err != nil {
		return usageError{fmt.Errorf("--shards %q: %v", *shards, err)}
	}
	if *dims != "" {
		spec.DimensionNames = strings.Split(*dims, ",")
	}
	switch *format {
	case "v3":
		spec.Format = client.FormatV3
	case "v2":
		spec.Format = client.FormatV2
	case "nczarr":
		spec.Format = client.FormatNCZarr
	default:
		return usageError{fmt.Errorf("--format %q: want v3, v2 or nczarr", *format)}
	}
	ctx, c, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	a, err := c.CreateArray(ctx, path, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "created /%s: %s %v in chunks %v\n", a.Path, a.DataType, a.Shape, a.ChunkShape)
	return nil
}

func parseInts(s string) ([]int64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int64
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q is not a non-negative integer", p)
		}
		out = append(out, v)
	}
	return out, nil
}
