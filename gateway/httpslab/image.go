package httpslab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/gateway"
)

// readWhole reads the whole selection of req into one buffer reserved
// against the memory budget, with extra bytes more for what the caller
// makes of it; release gives the reservation back.
func (h *handler) readWhole(ctx context.Context, req *request, elem, extra int64) (data []byte, release func(), err error) {
	n := elem * product(req.shape)
	res, err := h.g.Budget().Acquire(ctx, n+extra, fmt.Sprintf("the %s of the slab of %q", req.format, req.path))
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, n)
	if n > 0 {
		if err := h.readBand(ctx, req, req.sel, buf, elem, func([]byte) error { return nil }); err != nil {
			res.Release()
			return nil, nil, err
		}
	}
	return buf, res.Release, nil
}

// serveJSON answers with {"shape": [...], "data_type": "...", "data": nested lists}.
func (h *handler) serveJSON(w http.ResponseWriter, r *http.Request, req *request) error {
	count := product(req.shape)
	if count > h.opts.MaxJSONElements {
		return errs.New(errs.ResourceExhausted, "slab of %q has %d elements, more than the %d a JSON response may hold; use format=npy or raw, or read in parts", req.path, count, h.opts.MaxJSONElements)
	}
	var vals []any
	if req.array.DataType.Size == 0 {
		strs, err := h.readStrings(r.Context(), req)
		if err != nil {
			return err
		}
		vals = make([]any, len(strs))
		for i, s := range strs {
			vals[i] = s
		}
	} else {
		elem := int64(req.array.DataType.Size)
		data, release, err := h.readWhole(r.Context(), req, elem, 0)
		if err != nil {
			return err
		}
		defer release()
		vals = make([]any, count)
		conv, ok := numeric(req.array.DataType)
		for i := range count {
			b := data[i*elem : (i+1)*elem]
			switch {
			case req.array.DataType.Name == "bool":
				vals[i] = b[0] != 0
			case ok && !strings.HasPrefix(req.array.DataType.Name, "complex"):
				f := conv(b)
				if math.IsNaN(f) || math.IsInf(f, 0) {
					vals[i] = strconv.FormatFloat(f, 'g', -1, 64) // "NaN", "+Inf": JSON has no such numbers
				} else if strings.HasPrefix(req.array.DataType.Name, "int") || strings.HasPrefix(req.array.DataType.Name, "uint") {
					vals[i] = json.Number(intString(req.array.DataType.Name, b))
				} else {
					vals[i] = f
				}
			default:
				vals[i] = fmt.Sprintf("%x", b)
			}
		}
	}
	var nest func(d int, off int64) (any, int64)
	nest = func(d int, off int64) (any, int64) {
		if d == len(req.shape) {
			return vals[off], off + 1
		}
		out := make([]any, req.shape[d])
		for i := range out {
			out[i], off = nest(d+1, off)
		}
		return out, off
	}
	var data any
	if count > 0 || len(req.shape) > 0 {
		data, _ = nest(0, 0)
	}
	body, err := json.Marshal(map[string]any{"shape": req.shape, "data_type": req.array.DataType.Name, "data": data})
	if err != nil {
		return errs.Wrap(errs.Internal, err, "encoding the slab of %q as JSON", req.path)
	}
	setSlabHeaders(w, req)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
	return nil
}

// intString is an integer element as a decimal, exact for 64 bits.
func intString(name string, b []byte) string {
	var u uint64
	for i := len(b) - 1; i >= 0; i-- {
		u = u<<8 | uint64(b[i])
	}
	if strings.HasPrefix(name, "uint") {
		return strconv.FormatUint(u, 10)
	}
	shift := 64 - 8*len(b)
	return strconv.FormatInt(int64(u<<shift)>>shift, 10)
}

// readStrings reads a variable-length slab (string or bytes) as strings,
// C order.
func (h *handler) readStrings(ctx context.Context, req *request) ([]string, error) {
	var shape []int64
	var out []string
	err := h.g.ReadSlab(ctx, req.path, req.sel, func(si gateway.SlabInfo) error {
		shape = si.Shape
		out = make([]string, product(shape))
		return nil
	}, func(b gateway.Block) error {
		if len(b.Offsets) != int(product(b.Shape))+1 {
			return errs.New(errs.Internal, "variable-length block of shape %v with %d offsets", b.Shape, len(b.Offsets))
		}
		idx := make([]int64, len(b.Shape))
		for k := range product(b.Shape) {
			flat := int64(0)
			for d := range shape {
				flat = flat*shape[d] + b.Origin[d] + idx[d]
			}
			lo, hi := b.Offsets[k], b.Offsets[k+1]
			if lo < 0 || hi < lo || hi > int64(len(b.Data)) {
				return errs.New(errs.Internal, "variable-length block with offsets outside its data")
			}
			out[flat] = string(b.Data[lo:hi])
			for d := len(idx) - 1; d >= 0; d-- {
				idx[d]++
				if idx[d] < b.Shape[d] {
					break
				}
				idx[d] = 0
			}
		}
		return nil
	})
	return out, err
}

// servePNG answers with an image of a 2-D selection: dimensions of length
// 1 are dropped, one left is a single row.
func (h *handler) servePNG(w http.ResponseWriter, r *http.Request, req *request) error {
	var dims []int64
	for _, s := range req.shape {
		if s != 1 {
			dims = append(dims, s)
		}
	}
	if len(dims) > 2 {
		return errs.New(errs.InvalidArgument, "format=png needs a 2-D selection; the slab of %q has shape %v (select one index along all but two dimensions)", req.path, req.shape)
	}
	for len(dims) < 2 {
		dims = append([]int64{1}, dims...)
	}
	height, width := dims[0], dims[1]
	if height*width > h.opts.MaxPNGPixels {
		return errs.New(errs.ResourceExhausted, "a PNG of %d × %d pixels is more than the %d this server draws; select a smaller or strided (::n) region", height, width, h.opts.MaxPNGPixels)
	}
	if height == 0 || width == 0 {
		return errs.New(errs.InvalidArgument, "the selection of %q is empty (shape %v): no image to draw", req.path, req.shape)
	}
	conv, ok := numeric(req.array.DataType)
	if !ok {
		return errs.New(errs.InvalidArgument, "format=png needs numbers; %q holds %s", req.path, req.array.DataType.Name)
	}
	cmap := r.URL.Query().Get("cmap")
	var palette func(t float64) color.NRGBA
	switch cmap {
	case "", "gray", "grey":
		palette = gray
	case "viridis":
		palette = viridis
	default:
		return errs.New(errs.InvalidArgument, "cmap %q: want gray or viridis", cmap)
	}
	vmin, vmax, err := valueRange(r)
	if err != nil {
		return err
	}
	elem := int64(req.array.DataType.Size)
	// The image (4 bytes a pixel) and its encoding (at most about as
	// much) are reserved with the data.
	data, release, err := h.readWhole(r.Context(), req, elem, 8*height*width)
	if err != nil {
		return err
	}
	defer release()
	fill := req.array.FillValue
	isFill := func(b []byte) bool { return len(fill) == len(b) && bytes.Equal(fill, b) }
	count := height * width
	if math.IsNaN(vmin) || math.IsNaN(vmax) {
		lo, hi := math.Inf(1), math.Inf(-1)
		for i := range count {
			b := data[i*elem : (i+1)*elem]
			if isFill(b) {
				continue
			}
			if f := conv(b); !math.IsNaN(f) && !math.IsInf(f, 0) {
				lo, hi = min(lo, f), max(hi, f)
			}
		}
		if math.IsNaN(vmin) {
			vmin = lo
		}
		if math.IsNaN(vmax) {
			vmax = hi
		}
	}
	img := image.NewNRGBA(image.Rect(0, 0, int(width), int(height)))
	for i := range count {
		b := data[i*elem : (i+1)*elem]
		f := conv(b)
		px := i * 4
		if isFill(b) || math.IsNaN(f) {
			continue // transparent
		}
		t := 0.5
		if vmax > vmin {
			t = (f - vmin) / (vmax - vmin)
		}
		c := palette(min(max(t, 0), 1))
		img.Pix[px], img.Pix[px+1], img.Pix[px+2], img.Pix[px+3] = c.R, c.G, c.B, c.A
	}
	var out bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&out, img); err != nil {
		return errs.Wrap(errs.Internal, err, "encoding the PNG of %q", req.path)
	}
	setSlabHeaders(w, req)
	if !math.IsInf(vmin, 0) && !math.IsInf(vmax, 0) {
		w.Header().Set("X-Zarr-Value-Range", strconv.FormatFloat(vmin, 'g', -1, 64)+","+strconv.FormatFloat(vmax, 'g', -1, 64))
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Content-Length", strconv.Itoa(out.Len()))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(out.Bytes())
	}
	return nil
}

// valueRange reads vmin and vmax; NaN means not given.
func valueRange(r *http.Request) (vmin, vmax float64, err error) {
	q := r.URL.Query()
	get := func(name string) (float64, error) {
		s := q.Get(name)
		if s == "" {
			return math.NaN(), nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, errs.New(errs.InvalidArgument, "%s %q is not a finite number", name, s)
		}
		return f, nil
	}
	if vmin, err = get("vmin"); err != nil {
		return 0, 0, err
	}
	if vmax, err = get("vmax"); err != nil {
		return 0, 0, err
	}
	return vmin, vmax, nil
}

func gray(t float64) color.NRGBA {
	v := uint8(math.Round(t * 255))
	return color.NRGBA{v, v, v, 255}
}

// viridisStops are matplotlib's viridis at 0, 1/8, ..., 1; viridis
// interpolates linearly between them.
var viridisStops = [9][3]float64{
	{68, 1, 84}, {71, 44, 122}, {59, 81, 139}, {44, 113, 142}, {33, 144, 141},
	{39, 173, 129}, {92, 200, 99}, {170, 220, 50}, {253, 231, 37},
}

func viridis(t float64) color.NRGBA {
	x := t * 8
	i := min(int(x), 7)
	f := x - float64(i)
	var c [3]uint8
	for k := range c {
		c[k] = uint8(math.Round(viridisStops[i][k]*(1-f) + viridisStops[i+1][k]*f))
	}
	return color.NRGBA{c[0], c[1], c[2], 255}
}
