package zarr

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// NCZarrArray is the netCDF information of an NCZarr variable.
type NCZarrArray struct {
	// DimensionRefs are the fully qualified names of the variable's shared
	// dimensions ("/x", "/g1/y"), one per dimension; empty for a scalar.
	DimensionRefs []string
	// Storage is "chunked", "contiguous", "compact" or "scalar".
	Storage string
	// AttributeTypes maps user attribute names to their netCDF types as
	// numpy typestrings ("<i4", ">S1" for char, "|J0" for JSON).
	AttributeTypes map[string]string
	// MaxStrLen is _nczarr_maxstrlen, 0 when absent.
	MaxStrLen int
	// Legacy is set when the array is stored in netCDF-C 4.9.0's form
	// (_NCZARR_ARRAY in .zarray, _NCZARR_ATTR in .zattrs): 4.9.0 reads
	// only that form, 4.10 only the lower-case one, so an array keeps the
	// form its dataset was written in.
	Legacy bool
}

// NCZarrGroup is the netCDF information of an NCZarr group (its shared
// dimensions are Group.Dimensions).
type NCZarrGroup struct {
	// Superblock is set for the root group of an NCZarr dataset, with the
	// version it records.
	Superblock bool
	Version    string
	// Arrays and Groups list the group's variables and subgroups.
	Arrays []string
	Groups []string
	// AttributeTypes maps user attribute names to their netCDF types.
	AttributeTypes map[string]string
	// DefaultMaxStrLen is _nczarr_default_maxstrlen, 0 when absent.
	DefaultMaxStrLen int
	// Legacy is set when the group is stored in netCDF-C 4.9.0's form
	// (_NCZARR_SUPERBLOCK and _NCZARR_GROUP in .zgroup, _NCZARR_ATTR in
	// .zattrs); see NCZarrArray.Legacy.
	Legacy bool
}

type ncArrayRaw struct{ array json.RawMessage }

type ncGroupRaw struct{ superblock, group json.RawMessage }

// ncReserved reports attribute names NCZarr and xarray reserve.
func ncReserved(key string) bool {
	return strings.HasPrefix(strings.ToLower(key), "_nczarr_") || key == "_ARRAY_DIMENSIONS"
}

// splitAttrs separates reserved attributes from user attributes, keeping
// the user attributes' document verbatim when nothing is reserved.
func splitAttrs(zattrs []byte) (user json.RawMessage, reserved map[string]json.RawMessage, err error) {
	if len(bytes.TrimSpace(zattrs)) == 0 {
		return nil, nil, nil
	}
	members, err := parseObject(zattrs, ".zattrs")
	if err != nil {
		return nil, nil, err
	}
	var w objWriter
	for _, kv := range members {
		if ncReserved(kv.Key) {
			if reserved == nil {
				reserved = map[string]json.RawMessage{}
			}
			reserved[strings.ToLower(kv.Key)] = kv.Value
			if kv.Key == "_ARRAY_DIMENSIONS" {
				reserved[kv.Key] = kv.Value
			}
			continue
		}
		w.raw(kv.Key, kv.Value)
	}
	if reserved == nil {
		return bytes.TrimSpace(zattrs), nil, nil
	}
	if w.buf.Len() == 0 {
		w.buf.WriteByte('{')
	}
	w.buf.WriteByte('}')
	return w.buf.Bytes(), reserved, nil
}

// ncJSON reads an NCZarr value, which old netCDF versions store as a JSON
// string holding the JSON.
func ncJSON(v json.RawMessage, out any, field string) error {
	v = bytes.TrimSpace(v)
	if len(v) > 0 && v[0] == '"' {
		var s string
		if json.Unmarshal(v, &s) == nil {
			v = []byte(s)
		}
	}
	if err := decodeNumber(v, out); err != nil {
		return newError(ErrInvalid, "%s: %v", field, err)
	}
	return nil
}

func parseAttrTypes(v json.RawMessage, field string) (map[string]string, error) {
	if v == nil {
		return nil, nil
	}
	var at struct {
		Types map[string]string `json:"types"`
	}
	if err := ncJSON(v, &at, field); err != nil {
		return nil, err
	}
	for k := range at.Types {
		if ncReserved(k) {
			delete(at.Types, k)
		}
	}
	if len(at.Types) == 0 {
		return nil, nil
	}
	return at.Types, nil
}

func parseIntAttr(v json.RawMessage, field string) (int, error) {
	if v == nil {
		return 0, nil
	}
	var x any
	if err := ncJSON(v, &x, field); err != nil {
		return 0, err
	}
	if l, ok := x.([]any); ok && len(l) == 1 {
		x = l[0]
	}
	n, ok := x.(json.Number)
	if !ok {
		return 0, newError(ErrInvalid, "%s: must be an integer", field)
	}
	i, err := strconv.Atoi(string(n))
	if err != nil || i < 0 {
		return 0, newError(ErrInvalid, "%s: must be a non-negative integer", field)
	}
	return i, nil
}

func (a *Array) applyV2Attrs(zattrs []byte, nc ncArrayRaw) error {
	user, res, err := splitAttrs(zattrs)
	if err != nil {
		return err
	}
	a.Attributes = user
	ncArr := nc.array
	if ncArr == nil {
		ncArr = res["_nczarr_array"]
	}
	if ncArr != nil {
		info := &NCZarrArray{}
		var raw struct {
			Dimrefs    []string `json:"dimrefs"`
			DimRefs    []string `json:"dimension_references"`
			Dimensions []string `json:"dimensions"`
			Storage    string   `json:"storage"`
			// netCDF-C 4.10 marks a scalar with "scalar": 1 (and no
			// dimension references, its storage "chunked").
			Scalar json.RawMessage `json:"scalar"`
		}
		if err := ncJSON(ncArr, &raw, "_nczarr_array"); err != nil {
			return err
		}
		info.DimensionRefs = raw.Dimrefs
		if info.DimensionRefs == nil {
			info.DimensionRefs = raw.DimRefs
		}
		if info.DimensionRefs == nil {
			info.DimensionRefs = raw.Dimensions
		}
		info.Storage = raw.Storage
		// Only netCDF 4.9.0 and older put it into .zarray.
		info.Legacy = nc.array != nil
		if info.AttributeTypes, err = parseAttrTypes(firstOf(res, "_nczarr_attr", "_nczarr_attrs"), "_nczarr_attr"); err != nil {
			return err
		}
		if info.MaxStrLen, err = parseIntAttr(res["_nczarr_maxstrlen"], "_nczarr_maxstrlen"); err != nil {
			return err
		}
		scalar := info.Storage == "scalar" || (len(info.DimensionRefs) == 1 && info.DimensionRefs[0] == "/_scalar_") ||
			(len(info.DimensionRefs) == 0 && ncTrue(raw.Scalar))
		if scalar {
			if len(a.Shape) != 1 || a.Shape[0] != 1 {
				return newError(ErrInvalid, "_nczarr_array: a scalar must have shape [1]")
			}
			a.Shape, a.ChunkShape = []int64{}, []int64{}
			info.DimensionRefs = nil
			info.Storage = "scalar"
			a.Codecs = dropTranspose(a.Codecs)
		} else {
			if len(info.DimensionRefs) != len(a.Shape) {
				return newError(ErrInvalid, "_nczarr_array.dimrefs: has %d entries, shape has %d dimensions", len(info.DimensionRefs), len(a.Shape))
			}
			a.DimensionNames = make([]string, len(info.DimensionRefs))
			for i, r := range info.DimensionRefs {
				a.DimensionNames[i] = r[strings.LastIndexByte(r, '/')+1:]
			}
		}
		a.NCZarr = info
	}
	if xd, ok := res["_ARRAY_DIMENSIONS"]; ok && a.DimensionNames == nil && len(a.Shape) > 0 {
		var names []string
		if err := json.Unmarshal(xd, &names); err != nil || len(names) != len(a.Shape) {
			return newError(ErrInvalid, "_ARRAY_DIMENSIONS: must list one name per dimension")
		}
		a.DimensionNames = names
	}
	return nil
}

// ncTrue reports whether an NCZarr flag is set: 1 or true.
func ncTrue(v json.RawMessage) bool {
	switch string(bytes.TrimSpace(v)) {
	case "1", "true":
		return true
	}
	return false
}

func dropTranspose(c []CodecSpec) []CodecSpec {
	if len(c) > 0 && c[0].Name == "transpose" {
		return c[1:]
	}
	return c
}

func firstOf(m map[string]json.RawMessage, keys ...string) json.RawMessage {
	for _, k := range keys {
		if v, ok := m[k]; ok {
			return v
		}
	}
	return nil
}

func (g *Group) applyV2Attrs(zattrs []byte, nc ncGroupRaw) error {
	user, res, err := splitAttrs(zattrs)
	if err != nil {
		return err
	}
	g.Attributes = user
	sb := nc.superblock
	if sb == nil {
		sb = res["_nczarr_superblock"]
	}
	grp := nc.group
	if grp == nil {
		grp = res["_nczarr_group"]
	}
	if sb == nil && grp == nil {
		return nil
	}
	// Only netCDF 4.9.0 and older put them into .zgroup.
	info := &NCZarrGroup{Legacy: nc.superblock != nil || nc.group != nil}
	if sb != nil {
		var s struct {
			Version any `json:"version"`
		}
		if err := ncJSON(sb, &s, "_nczarr_superblock"); err != nil {
			return err
		}
		info.Superblock = true
		if s.Version != nil {
			info.Version = strings.Trim(string(mustJSON(s.Version)), `"`)
		}
	}
	if grp != nil {
		var raw map[string]json.RawMessage
		if err := ncJSON(grp, &raw, "_nczarr_group"); err != nil {
			return err
		}
		if err := json.Unmarshal(orNull(firstOf(raw, "vars", "arrays", "variables")), &info.Arrays); err != nil {
			return newError(ErrInvalid, "_nczarr_group.vars: must be a list of names")
		}
		if err := json.Unmarshal(orNull(firstOf(raw, "groups", "subgroups")), &info.Groups); err != nil {
			return newError(ErrInvalid, "_nczarr_group.groups: must be a list of names")
		}
		if g.Dimensions, err = parseNCDims(firstOf(raw, "dims", "dimensions")); err != nil {
			return err
		}
	}
	if info.AttributeTypes, err = parseAttrTypes(firstOf(res, "_nczarr_attr", "_nczarr_attrs"), "_nczarr_attr"); err != nil {
		return err
	}
	if info.DefaultMaxStrLen, err = parseIntAttr(res["_nczarr_default_maxstrlen"], "_nczarr_default_maxstrlen"); err != nil {
		return err
	}
	g.NCZarr = info
	return nil
}

func orNull(v json.RawMessage) json.RawMessage {
	if v == nil {
		return json.RawMessage("null")
	}
	return v
}

// parseNCDims reads the dimensions of _nczarr_group in any of the forms
// netCDF has written: {"x": 4}, {"x": {"size": 4, "unlimited": 1}} or
// [{"name": "x", "size": 4, "unlimited": 1}].
func parseNCDims(v json.RawMessage) ([]Dimension, error) {
	const field = "_nczarr_group.dims"
	if v == nil || isNull(v) {
		return nil, nil
	}
	type dimObj struct {
		Name      string      `json:"name"`
		Size      json.Number `json:"size"`
		Unlimited json.Number `json:"unlimited"`
	}
	toDim := func(name string, size json.Number, unl json.Number) (Dimension, error) {
		n, err := strconv.ParseInt(string(size), 10, 64)
		if err != nil || n < 0 {
			return Dimension{}, newError(ErrInvalid, "%s[%q]: size must be a non-negative integer", field, name)
		}
		return Dimension{Name: name, Size: n, Unlimited: unl != "" && unl != "0"}, nil
	}
	if isObject(v) {
		members, err := parseObject(v, field)
		if err != nil {
			return nil, err
		}
		out := make([]Dimension, 0, len(members))
		for _, kv := range members {
			var d dimObj
			if isObject(kv.Value) {
				if err := decodeNumber(kv.Value, &d); err != nil {
					return nil, newError(ErrInvalid, "%s[%q]: %v", field, kv.Key, err)
				}
			} else {
				var s any
				if err := decodeNumber(kv.Value, &s); err != nil {
					return nil, newError(ErrInvalid, "%s[%q]: %v", field, kv.Key, err)
				}
				switch x := s.(type) {
				case json.Number:
					d.Size = x
				case string:
					d.Size = json.Number(x)
				}
			}
			dim, err := toDim(kv.Key, d.Size, d.Unlimited)
			if err != nil {
				return nil, err
			}
			out = append(out, dim)
		}
		return out, nil
	}
	var list []dimObj
	if err := decodeNumber(v, &list); err != nil {
		return nil, newError(ErrInvalid, "%s: %v", field, err)
	}
	out := make([]Dimension, 0, len(list))
	for _, d := range list {
		dim, err := toDim(d.Name, d.Size, d.Unlimited)
		if err != nil {
			return nil, err
		}
		out = append(out, dim)
	}
	return out, nil
}

// encodeUserAttrs copies the user attributes into w.
func encodeUserAttrs(w *objWriter, attrs json.RawMessage) error {
	if attrs == nil {
		return nil
	}
	members, err := parseObject(attrs, "attributes")
	if err != nil {
		return err
	}
	for _, kv := range members {
		w.raw(kv.Key, kv.Value)
	}
	return nil
}

// userAttrTypes returns the netCDF type of each user attribute, as
// _nczarr_attr records them: the recorded type while it still fits the
// value, else the type the value implies. Without it netCDF guesses from
// the JSON, and 4.10 reads a number such as 7 as a byte; attributes with no
// type netCDF 4.9.0 can spell are left out (it guesses those itself).
func userAttrTypes(attrs json.RawMessage, recorded map[string]string, legacy bool) (map[string]string, error) {
	t := map[string]string{}
	if attrs == nil {
		return t, nil
	}
	members, err := parseObject(attrs, "attributes")
	if err != nil {
		return nil, err
	}
	for _, kv := range members {
		if r, ok := recorded[kv.Key]; ok && typeFits(r, kv.Value, legacy) {
			t[kv.Key] = r
		} else if typ := attrType(kv.Value, legacy); typ != "" {
			t[kv.Key] = typ
		}
	}
	return t, nil
}

// attrType is the netCDF type an attribute value implies, as a numpy
// typestring, chosen as netCDF-C writes such values: char (">S1"; 4.9.0
// spells it "<U1") for a string; int ("<i4") for integers that fit, int64,
// then uint64 beyond; double for any number with a fraction or exponent;
// JSON ("|J0") for anything else, which 4.9.0 cannot type ("").
func attrType(v json.RawMessage, legacy bool) string {
	var x any
	if decodeNumber(v, &x) != nil {
		return ""
	}
	other := "|J0"
	if legacy {
		other = ""
	}
	var nums []json.Number
	switch x := x.(type) {
	case string:
		if legacy {
			return "<U1"
		}
		return ">S1"
	case json.Number:
		nums = []json.Number{x}
	case []any:
		for _, e := range x {
			n, ok := e.(json.Number)
			if !ok {
				return other
			}
			nums = append(nums, n)
		}
	}
	if len(nums) == 0 {
		return other
	}
	var minI, maxI int64
	unsigned, float := false, false
	for _, n := range nums {
		i, err := strconv.ParseInt(string(n), 10, 64)
		switch {
		case err == nil:
			minI, maxI = min(minI, i), max(maxI, i)
		case func() bool { _, err := strconv.ParseUint(string(n), 10, 64); return err == nil }():
			unsigned = true
		default:
			float = true
		}
	}
	switch {
	case float, unsigned && minI < 0:
		return "<f8"
	case unsigned:
		return "<u8"
	case minI >= math.MinInt32 && maxI <= math.MaxInt32:
		return "<i4"
	}
	return "<i8"
}

// typeFits reports whether a recorded attribute type still describes the
// value (a string type for a string, an integer type for integers, a
// floating type for numbers), so an attribute rewritten with a value of
// another kind is typed afresh rather than mislabelled.
func typeFits(t string, v json.RawMessage, legacy bool) bool {
	implied := attrType(v, false)
	if t == "|J0" {
		return !legacy
	}
	if len(t) < 2 {
		return false
	}
	switch t[1] {
	case 'S', 'U':
		return implied == ">S1"
	case 'f':
		return implied == "<f8" || implied == "<i4" || implied == "<i8" || implied == "<u8"
	case 'i', 'u':
		return implied == "<i4" || implied == "<i8" || implied == "<u8"
	}
	return false
}

// withReserved adds the types of NCZarr's own attributes, which netCDF
// 4.10 lists with the user ones.
func withReserved(t map[string]string, reserved ...string) map[string]string {
	for _, r := range reserved {
		t[r] = "|J0"
	}
	return t
}

// ncArrayInfo is the _nczarr_array object, the same in both forms.
func (a *Array) ncArrayInfo() (json.RawMessage, error) {
	nc := a.NCZarr
	refs := nc.DimensionRefs
	storage := nc.Storage
	if len(a.Shape) == 0 {
		refs, storage = []string{}, "scalar"
	} else if len(refs) != len(a.Shape) {
		refs = make([]string, len(a.Shape))
		for i := range refs {
			name := ""
			if i < len(a.DimensionNames) {
				name = a.DimensionNames[i]
			}
			if name == "" {
				return nil, newError(ErrInvalid, "NCZarr: dimension %d has no name", i)
			}
			refs[i] = "/" + name
		}
	}
	if storage == "" || storage == "scalar" && len(a.Shape) > 0 {
		storage = "chunked"
	}
	var arr objWriter
	arr.add("dimrefs", refs)
	arr.add("storage", storage)
	arr.buf.WriteByte('}')
	return arr.buf.Bytes(), arr.err
}

func (a *Array) encodeV2Attrs() ([]byte, error) {
	w := objWriter{indent: "    "}
	if err := encodeUserAttrs(&w, a.Attributes); err != nil {
		return nil, err
	}
	named := len(a.DimensionNames) > 0
	for _, n := range a.DimensionNames {
		named = named && n != ""
	}
	if named {
		w.add("_ARRAY_DIMENSIONS", a.DimensionNames)
	}
	if nc := a.NCZarr; nc != nil {
		types, err := userAttrTypes(a.Attributes, nc.AttributeTypes, nc.Legacy)
		if err != nil {
			return nil, err
		}
		if nc.Legacy {
			// _NCZARR_ARRAY goes into .zarray (encodeV2Legacy).
			w.add("_NCZARR_ATTR", map[string]any{"types": types})
			return w.bytes()
		}
		info, err := a.ncArrayInfo()
		if err != nil {
			return nil, err
		}
		w.raw("_nczarr_array", info)
		if nc.MaxStrLen > 0 {
			w.add("_nczarr_maxstrlen", nc.MaxStrLen)
		}
		w.add("_nczarr_attr", map[string]any{"types": withReserved(types, "_nczarr_array", "_nczarr_attr")})
	}
	return w.bytes()
}

// encodeV2Legacy adds what netCDF 4.9.0 reads from .zarray (and nothing
// for arrays in the current form).
func (a *Array) encodeV2Legacy(w *objWriter) error {
	if a.NCZarr == nil || !a.NCZarr.Legacy {
		return nil
	}
	info, err := a.ncArrayInfo()
	if err != nil {
		return err
	}
	w.raw("_NCZARR_ARRAY", info)
	return nil
}

// ncGroupInfo is the _nczarr_group object, the same in both forms.
func (g *Group) ncGroupInfo(nc *NCZarrGroup) json.RawMessage {
	var dims objWriter
	for _, d := range g.Dimensions {
		if d.Unlimited {
			dims.add(d.Name, map[string]int64{"size": d.Size, "unlimited": 1})
		} else {
			dims.add(d.Name, d.Size)
		}
	}
	if dims.buf.Len() == 0 {
		dims.buf.WriteByte('{')
	}
	dims.buf.WriteByte('}')
	var grp objWriter
	grp.raw("dims", dims.buf.Bytes())
	grp.add("vars", nonNilStrings(nc.Arrays))
	grp.add("groups", nonNilStrings(nc.Groups))
	grp.buf.WriteByte('}')
	return grp.buf.Bytes()
}

func (nc *NCZarrGroup) superblock() map[string]any {
	v := nc.Version
	if v == "" {
		v = "2.0.0"
	}
	if nc.Legacy {
		return map[string]any{"version": v}
	}
	return map[string]any{"version": v, "format": 2}
}

func (g *Group) encodeV2Attrs() ([]byte, error) {
	w := objWriter{indent: "    "}
	if err := encodeUserAttrs(&w, g.Attributes); err != nil {
		return nil, err
	}
	if nc := g.NCZarr; nc != nil || len(g.Dimensions) > 0 {
		if nc == nil {
			nc = &NCZarrGroup{}
		}
		types, err := userAttrTypes(g.Attributes, nc.AttributeTypes, nc.Legacy)
		if err != nil {
			return nil, err
		}
		if nc.Legacy {
			// _NCZARR_SUPERBLOCK and _NCZARR_GROUP go into .zgroup
			// (encodeV2Legacy).
			w.add("_NCZARR_ATTR", map[string]any{"types": types})
			return w.bytes()
		}
		w.raw("_nczarr_group", g.ncGroupInfo(nc))
		reserved := []string{"_nczarr_group", "_nczarr_attr"}
		if nc.Superblock {
			w.add("_nczarr_superblock", nc.superblock())
			reserved = append(reserved, "_nczarr_superblock")
		}
		if nc.DefaultMaxStrLen > 0 {
			w.add("_nczarr_default_maxstrlen", nc.DefaultMaxStrLen)
		}
		w.add("_nczarr_attr", map[string]any{"types": withReserved(types, reserved...)})
	}
	return w.bytes()
}

// encodeV2Legacy adds what netCDF 4.9.0 reads from .zgroup.
func (g *Group) encodeV2Legacy(w *objWriter) {
	nc := g.NCZarr
	if nc == nil || !nc.Legacy {
		return
	}
	if nc.Superblock {
		w.add("_NCZARR_SUPERBLOCK", nc.superblock())
	}
	w.raw("_NCZARR_GROUP", g.ncGroupInfo(nc))
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
