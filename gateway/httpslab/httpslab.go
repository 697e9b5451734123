// Package httpslab serves hyperslabs of the gateway's arrays over plain
// HTTP: GET <prefix>/<path>?sel=0,100:200,::2&format=npy returns the
// selection as a NumPy .npy file (the default), raw little-endian bytes
// with the shape and data type in headers, JSON (small slabs), or a PNG of
// a 2-D selection.
//
// The selection grammar is the CLI's (client.ParseSelection): NumPy-style
// items, negative bounds counting from the end, bounds past the end an
// error. Every request goes through the engine's read path
// (gateway.ReadSlab) with its limits (MaxSlabBytes, MaxSlabChunks, the
// memory budget), checked before the first byte is sent; the engine's
// error codes become HTTP statuses (Status).
//
// # Streaming and memory
//
// The engine emits blocks in no particular order, so its output cannot be
// copied to a C-order stream as it comes. The handler therefore reads the
// slab in bands along its first dimension, aligned to the chunk grid (a
// band is one or more whole rows of chunks of the selection, about
// Options.BandBytes of output, at least one chunk row), each band one
// engine read, assembled in a buffer reserved against the gateway's memory
// budget; the next band is read while the last is written out. A request
// holds at most two bands of output (each the larger of BandBytes and one
// chunk row of the selection) beside the engine's own bounded read memory,
// whatever the slab's size; the .npy header and Content-Length go out first, since the
// shape is known up front. JSON and PNG need the whole selection (nested
// lists; the value range and the encoder), so they are bounded by
// Options.MaxJSONElements and Options.MaxPNGPixels instead.
//
// An error after the response has started (a chunk that fails to decode
// in a later band) can no longer change the status: the handler aborts
// the connection (http.ErrAbortHandler), so the client sees a body shorter
// than its Content-Length, never a silently short file.
package httpslab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/x448/float16"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/gateway"
	"github.com/zarrgate/zarrgate/internal/membudget"
	"github.com/zarrgate/zarrgate/zarr"
)

// Authorize decides whether the request r may read the node at path (no
// leading slash; "" is the root). A nil error allows it; an error's code
// (errs.Unauthenticated, errs.PermissionDenied, ...) becomes the response
// status through Status. It is called before anything is read, with the
// request whose context carries whatever the server's authentication put
// there (the principal of a verified token or client certificate).
type Authorize func(r *http.Request, path string) error

// Options configure the handler. The zero value is usable.
type Options struct {
	// Authorize is consulted for every request; nil allows everything
	// (tests, or a listener that authorizes before routing).
	Authorize Authorize
	// BandBytes is the output the handler assembles per engine read when
	// streaming .npy and raw responses. Default 16 MiB.
	BandBytes int64
	// MaxJSONElements bounds the elements of a JSON response. Default
	// 1<<16.
	MaxJSONElements int64
	// MaxPNGPixels bounds the pixels of a PNG response. Default 1<<24
	// (4096 × 4096).
	MaxPNGPixels int64
}

func (o Options) withDefaults() Options {
	if o.BandBytes <= 0 {
		o.BandBytes = 16 << 20
	}
	if o.MaxJSONElements <= 0 {
		o.MaxJSONElements = 1 << 16
	}
	if o.MaxPNGPixels <= 0 {
		o.MaxPNGPixels = 1 << 24
	}
	return o
}

// Handler returns the slab endpoint over g. It serves GET and HEAD of
// /<array path> relative to where it is mounted: mount it with
// http.StripPrefix("/slab", Handler(g, opts)) under "/slab/".
//
// Query parameters:
//
//	sel     the selection (default: the whole array)
//	format  npy (default), raw, json or png
//	cmap    png: gray (default) or viridis
//	vmin, vmax  png: the values mapped to the ends of the colormap
//	        (default: the selection's finite minimum and maximum)
func Handler(g *gateway.Gateway, opts Options) http.Handler {
	return &handler{g: g, opts: opts.withDefaults()}
}

type handler struct {
	g    *gateway.Gateway
	opts Options
}

// Headers of raw (and every) slab response.
const (
	HeaderShape     = "X-Zarr-Shape"      // "100,50" (empty for a 0-d slab)
	HeaderDataType  = "X-Zarr-Data-Type"  // the array's data type name
	HeaderByteOrder = "X-Zarr-Byte-Order" // "little"
)

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the slab endpoint serves GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	path := strings.Trim(r.URL.Path, "/")
	if err := h.serve(w, r, path); err != nil {
		WriteError(w, err)
	}
}

// request is one parsed slab request.
type request struct {
	path   string
	array  *zarr.Array
	sel    []zarr.Range
	shape  []int64
	format string
	chunk0 int64 // the chunk (inner chunk) length along dimension 0
}

// serve handles a request; an error it returns has not been answered yet.
func (h *handler) serve(w http.ResponseWriter, r *http.Request, path string) error {
	if h.opts.Authorize != nil {
		if err := h.opts.Authorize(r, path); err != nil {
			return err
		}
	}
	q := r.URL.Query()
	format := q.Get("format")
	if format == "" {
		format = "npy"
	}
	switch format {
	case "npy", "raw", "json", "png":
	default:
		return errs.New(errs.InvalidArgument, "format %q: want npy, raw, json or png", format)
	}
	ctx := r.Context()
	n, err := h.g.GetNode(ctx, path)
	if err != nil {
		return err
	}
	if n.Array == nil {
		return errs.New(errs.FailedPrecondition, "node %q is a group, not an array", path)
	}
	a := n.Array
	csel, err := client.ParseSelection(q.Get("sel"), a.Shape)
	if err != nil {
		return err
	}
	req := &request{path: path, array: a, format: format}
	if csel == nil {
		req.sel = zarr.FullSelection(a.Shape)
	} else {
		req.sel = make([]zarr.Range, len(csel))
		for d, s := range csel {
			req.sel[d] = zarr.Range{Start: s.Start, Stop: s.Stop, Step: s.Step}
		}
	}
	info, err := gateway.DescribeArray(a)
	if err != nil {
		return err
	}
	if len(info.ChunkShape) > 0 {
		req.chunk0 = max(info.ChunkShape[0], 1)
	}
	// The engine's own checks (slab size, chunk count) on the whole
	// selection, before anything is read: start runs once they pass.
	err = h.g.ReadSlab(ctx, path, req.sel, func(si gateway.SlabInfo) error {
		req.shape = si.Shape
		return errPlanned
	}, func(b gateway.Block) error { return nil })
	if !errors.Is(err, errPlanned) {
		if err == nil {
			err = errs.New(errs.Internal, "slab of %q: the engine read nothing", path)
		}
		return err
	}
	switch format {
	case "json":
		return h.serveJSON(w, r, req)
	case "png":
		return h.servePNG(w, r, req)
	}
	return h.serveStream(w, r, req)
}

var errPlanned = errors.New("planned")

// elemSize is the size of the array's elements, or an error for variable
// length types, which have no fixed-size binary form.
func elemSize(req *request) (int64, error) {
	if req.array.DataType.Size == 0 {
		return 0, errs.New(errs.InvalidArgument, "array %q has variable-length %s elements: only format=json can carry them", req.path, req.array.DataType.Name)
	}
	return int64(req.array.DataType.Size), nil
}

// serveStream writes a .npy or raw response band by band.
func (h *handler) serveStream(w http.ResponseWriter, r *http.Request, req *request) error {
	elem, err := elemSize(req)
	if err != nil {
		return err
	}
	var header []byte
	if req.format == "npy" {
		header = NpyHeader(req.array.DataType, req.shape)
	}
	total := elem * product(req.shape)
	setSlabHeaders(w, req)
	if req.format == "npy" {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", npyName(req.path)))
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	w.Header().Set("Content-Length", strconv.FormatInt(int64(len(header))+total, 10))
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return nil
	}
	started := false
	err = h.bands(r.Context(), req, elem, func(band []byte) error {
		if !started {
			started = true
			w.WriteHeader(http.StatusOK)
			if _, err := w.Write(header); err != nil {
				return errWrite{err}
			}
		}
		if _, err := w.Write(band); err != nil {
			return errWrite{err}
		}
		return nil
	})
	if err == nil && !started { // an empty slab
		w.WriteHeader(http.StatusOK)
		_, err = w.Write(header)
		if err != nil {
			err = errWrite{err}
		}
	}
	if err != nil && started {
		// The status is out: cut the body short of its Content-Length.
		panic(http.ErrAbortHandler)
	}
	var we errWrite
	if errors.As(err, &we) {
		panic(http.ErrAbortHandler) // the client went away
	}
	return err
}

// errWrite is a failed write to the client.
type errWrite struct{ error }

func setSlabHeaders(w http.ResponseWriter, req *request) {
	dims := make([]string, len(req.shape))
	for i, s := range req.shape {
		dims[i] = strconv.FormatInt(s, 10)
	}
	w.Header().Set(HeaderShape, strings.Join(dims, ","))
	w.Header().Set(HeaderDataType, req.array.DataType.Name)
	w.Header().Set(HeaderByteOrder, "little")
}

func npyName(path string) string {
	name := path
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	if name == "" {
		name = "root"
	}
	return name + ".npy"
}

// bands reads the slab of req band by band along its first dimension and
// passes each band, in C order, to fn; the band's buffer is reused after
// fn returns. The next band is read while fn writes the last one out, so
// two band buffers are reserved against the gateway's memory budget, up
// front.
func (h *handler) bands(ctx context.Context, req *request, elem int64, fn func([]byte) error) error {
	if product(req.shape) == 0 {
		return nil
	}
	if len(req.shape) == 0 {
		return h.readBand(ctx, req, req.sel, nil, elem, fn)
	}
	rowBytes := elem * product(req.shape[1:])
	s0 := req.sel[0]
	rows := req.shape[0]
	// firstRow is the first output row at or after array index boundary
	// along dimension 0: chunk row c's output rows run from
	// firstRow(c*chunk0) to firstRow((c+1)*chunk0).
	firstRow := func(boundary int64) int64 {
		if boundary <= s0.Start {
			return 0
		}
		return min(rows, (boundary-s0.Start+s0.Step-1)/s0.Step)
	}
	// The bands: chunk rows joined while they stay within BandBytes (at
	// least one each).
	type band struct{ lo, hi int64 }
	var list []band
	largest := int64(0)
	for lo := int64(0); lo < rows; {
		hi := lo
		for hi < rows {
			c := (s0.Start + hi*s0.Step) / req.chunk0
			next := firstRow((c + 1) * req.chunk0)
			if hi > lo && (next-lo)*rowBytes > h.opts.BandBytes {
				break
			}
			hi = next
		}
		list = append(list, band{lo, hi})
		largest = max(largest, (hi-lo)*rowBytes)
		lo = hi
	}
	nbuf := min(2, len(list))
	res, err := h.g.Budget().Acquire(ctx, int64(nbuf)*largest, fmt.Sprintf("assembling %d bands of up to %d bytes of the slab of %q", nbuf, largest, req.path))
	if err != nil {
		return err
	}
	defer res.Release()
	free := make(chan []byte, nbuf)
	for range nbuf {
		free <- make([]byte, largest)
	}
	type filled struct {
		buf []byte
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan filled, 1)
	go func() {
		defer close(out)
		for _, b := range list {
			var buf []byte
			select {
			case buf = <-free:
			case <-ctx.Done():
				return
			}
			buf = buf[:(b.hi-b.lo)*rowBytes]
			sel := append([]zarr.Range(nil), req.sel...)
			sel[0] = zarr.Range{Start: s0.Start + b.lo*s0.Step, Stop: s0.Start + (b.hi-1)*s0.Step + 1, Step: s0.Step}
			err := h.readBand(ctx, req, sel, buf, elem, func([]byte) error { return nil })
			select {
			case out <- filled{buf, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		cancel()
		for range out { // the reader is done before the buffers' reservation goes
		}
	}()
	for f := range out {
		if f.err != nil {
			return f.err
		}
		if err := fn(f.buf); err != nil {
			return err
		}
		free <- f.buf[:cap(f.buf)]
	}
	return ctx.Err()
}

// readBand reads one band into buf (allocated if nil) and passes it to fn.
func (h *handler) readBand(ctx context.Context, req *request, sel []zarr.Range, buf []byte, elem int64, fn func([]byte) error) error {
	var shape []int64
	filled := int64(0)
	err := h.g.ReadSlab(ctx, req.path, sel, func(si gateway.SlabInfo) error {
		shape = si.Shape
		if buf == nil {
			buf = make([]byte, elem*product(shape))
		}
		if int64(len(buf)) != elem*product(shape) {
			return errs.New(errs.Internal, "slab of %q: band of shape %v does not fit its buffer of %d bytes", req.path, shape, len(buf))
		}
		return nil
	}, func(b gateway.Block) error {
		n, err := place(buf, shape, b, elem)
		filled += n
		return err
	})
	if err != nil {
		return err
	}
	if filled != int64(len(buf)) {
		return errs.New(errs.Internal, "slab of %q: the engine's blocks covered %d of %d bytes", req.path, filled, len(buf))
	}
	return fn(buf)
}

// place copies block b into dst, a C-order buffer of shape, and returns
// the bytes copied.
func place(dst []byte, shape []int64, b gateway.Block, elem int64) (int64, error) {
	nd := len(shape)
	if len(b.Origin) != nd || len(b.Shape) != nd {
		return 0, errs.New(errs.Internal, "block of rank %d in a slab of rank %d", len(b.Shape), nd)
	}
	for d := range nd {
		if b.Origin[d] < 0 || b.Shape[d] < 0 || b.Origin[d]+b.Shape[d] > shape[d] {
			return 0, errs.New(errs.Internal, "block at %v of shape %v outside the slab's shape %v", b.Origin, b.Shape, shape)
		}
	}
	if int64(len(b.Data)) != elem*product(b.Shape) {
		return 0, errs.New(errs.Internal, "block of shape %v has %d bytes, want %d", b.Shape, len(b.Data), elem*product(b.Shape))
	}
	if nd == 0 {
		return int64(copy(dst, b.Data)), nil
	}
	if product(b.Shape) == 0 {
		return 0, nil
	}
	// strides of dst in bytes
	stride := make([]int64, nd)
	stride[nd-1] = elem
	for d := nd - 2; d >= 0; d-- {
		stride[d] = stride[d+1] * shape[d+1]
	}
	run := b.Shape[nd-1] * elem
	idx := make([]int64, nd-1) // position in the block's outer dimensions
	src := int64(0)
	for {
		off := b.Origin[nd-1] * elem
		for d := range nd - 1 {
			off += (b.Origin[d] + idx[d]) * stride[d]
		}
		copy(dst[off:off+run], b.Data[src:src+run])
		src += run
		d := nd - 2
		for ; d >= 0; d-- {
			idx[d]++
			if idx[d] < b.Shape[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			break
		}
	}
	return src, nil
}

func product(s []int64) int64 {
	n := int64(1)
	for _, x := range s {
		n *= x
	}
	return n
}

// NpyHeader is the header of a .npy (format 1.0) file of shape holding
// little-endian elements of dt, padded so the data starts at a multiple of
// 64 bytes.
func NpyHeader(dt zarr.DataType, shape []int64) []byte {
	dims := make([]string, len(shape))
	for i, s := range shape {
		dims[i] = strconv.FormatInt(s, 10)
	}
	tuple := strings.Join(dims, ", ")
	if len(dims) == 1 {
		tuple += ","
	}
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", npyDescr(dt), tuple)
	pad := 63 - (10+len(dict))%64
	hdr := make([]byte, 0, 10+len(dict)+pad+1)
	hdr = append(hdr, "\x93NUMPY\x01\x00"...)
	hdr = binary.LittleEndian.AppendUint16(hdr, uint16(len(dict)+pad+1))
	hdr = append(hdr, dict...)
	hdr = append(hdr, strings.Repeat(" ", pad)...)
	return append(hdr, '\n')
}

var npyTypes = map[string]string{
	"bool": "|b1", "int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8", "uint8": "|u1", "uint16": "<u2",
	"uint32": "<u4", "uint64": "<u8", "float16": "<f2", "float32": "<f4", "float64": "<f8", "complex64": "<c8", "complex128": "<c16",
}

func npyDescr(dt zarr.DataType) string {
	if d, ok := npyTypes[dt.Name]; ok {
		return d
	}
	switch dt.Kind {
	case zarr.KindFixedBytes:
		return fmt.Sprintf("|S%d", dt.Size)
	case zarr.KindFixedUnicode:
		return fmt.Sprintf("<U%d", dt.Size/4)
	}
	return fmt.Sprintf("|V%d", dt.Size)
}

// numeric returns a function reading one element of dt as a float64 (the
// real part of complex numbers), or false for types that have no numeric
// value.
func numeric(dt zarr.DataType) (func([]byte) float64, bool) {
	le := binary.LittleEndian
	switch dt.Name {
	case "bool", "uint8":
		return func(b []byte) float64 { return float64(b[0]) }, true
	case "int8":
		return func(b []byte) float64 { return float64(int8(b[0])) }, true
	case "int16":
		return func(b []byte) float64 { return float64(int16(le.Uint16(b))) }, true
	case "uint16":
		return func(b []byte) float64 { return float64(le.Uint16(b)) }, true
	case "int32":
		return func(b []byte) float64 { return float64(int32(le.Uint32(b))) }, true
	case "uint32":
		return func(b []byte) float64 { return float64(le.Uint32(b)) }, true
	case "int64":
		return func(b []byte) float64 { return float64(int64(le.Uint64(b))) }, true
	case "uint64":
		return func(b []byte) float64 { return float64(le.Uint64(b)) }, true
	case "float16":
		return func(b []byte) float64 { return float64(float16.Frombits(le.Uint16(b)).Float32()) }, true
	case "float32", "complex64":
		return func(b []byte) float64 { return float64(math.Float32frombits(le.Uint32(b))) }, true
	case "float64", "complex128":
		return func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) }, true
	}
	return nil, false
}

// Status is the HTTP status for an error of the engine (or of Authorize):
//
//	InvalidArgument      400  malformed selection or parameters
//	Unauthenticated      401
//	PermissionDenied     403
//	NotFound             404
//	AlreadyExists        409
//	FailedPrecondition   422  (a group where an array was asked for)
//	OutOfRange           416  selection bounds outside the array
//	ResourceExhausted    413  slab or chunk count over the limits, or more
//	                          than the whole memory budget: read in parts
//	  the budget busy    503  memory held by other calls for the budget's
//	                          wait (membudget.IsBusy): try again later
//	Unavailable, Aborted 503  (both 503s with Retry-After: 1)
//	DeadlineExceeded     504
//	Canceled             499  (the client went away; nginx's convention)
//	Unimplemented        501
//	DataLoss and others  500
func Status(err error) int {
	if membudget.IsBusy(err) {
		return http.StatusServiceUnavailable // the budget is in use: later
	}
	switch errs.CodeOf(err) {
	case errs.CodeOK:
		return http.StatusOK
	case errs.CodeInvalidArgument:
		return http.StatusBadRequest
	case errs.CodeUnauthenticated:
		return http.StatusUnauthorized
	case errs.CodePermissionDenied:
		return http.StatusForbidden
	case errs.CodeNotFound:
		return http.StatusNotFound
	case errs.CodeAlreadyExists:
		return http.StatusConflict
	case errs.CodeFailedPrecondition:
		return http.StatusUnprocessableEntity
	case errs.CodeOutOfRange:
		return http.StatusRequestedRangeNotSatisfiable
	case errs.CodeResourceExhausted:
		return http.StatusRequestEntityTooLarge
	case errs.CodeUnavailable, errs.CodeAborted:
		return http.StatusServiceUnavailable
	case errs.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case errs.CodeCanceled:
		return 499
	case errs.CodeUnimplemented:
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}

// WriteError answers a request with err's status and a plain-text message
// naming its code ("NotFound: node \"x\" not found").
func WriteError(w http.ResponseWriter, err error) {
	st := Status(err)
	if st == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	if st == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	w.Header().Set("X-Zarr-Error-Code", errs.CodeOf(err).String())
	http.Error(w, errs.CodeOf(err).String()+": "+err.Error(), st)
}
