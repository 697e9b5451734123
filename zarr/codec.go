package zarr

import (
	"encoding/json"
	"strconv"
)

// CodecSpec is one entry of a codec chain, as in a v3 "codecs" list: a name
// and its configuration. Chains read from v2 metadata are normalised into
// the same form: codecs that v3 defines keep their v3 names and
// configurations ("bytes", "transpose", "gzip", "zstd", "blosc", "crc32c",
// "sharding_indexed", "vlen-utf8", "vlen-bytes"); other numcodecs codecs are
// named "numcodecs.<id>" with numcodecs' own configuration, as zarr-python 3
// names them ("numcodecs.zlib", "numcodecs.lz4", "numcodecs.bz2",
// "numcodecs.shuffle", "numcodecs.delta").
type CodecSpec struct {
	Name          string          `json:"name"`
	Configuration json.RawMessage `json:"configuration,omitempty"`
	// MustUnderstand is false for a codec the document marks
	// "must_understand": false, which a reader that does not know it may
	// skip; nil otherwise.
	MustUnderstand *bool `json:"must_understand,omitempty"`
}

// CodecClass says what a codec consumes and produces.
type CodecClass uint8

// Codec classes, in the order they appear in a chain.
const (
	CodecUnknown CodecClass = iota
	ArrayToArray
	ArrayToBytes
	BytesToBytes
)

var codecClasses = map[string]CodecClass{
	"transpose":                  ArrayToArray,
	"bytes":                      ArrayToBytes,
	"vlen-utf8":                  ArrayToBytes,
	"vlen-bytes":                 ArrayToBytes,
	"sharding_indexed":           ArrayToBytes,
	"gzip":                       BytesToBytes,
	"zstd":                       BytesToBytes,
	"blosc":                      BytesToBytes,
	"crc32c":                     BytesToBytes,
	"numcodecs.delta":            ArrayToArray,
	"numcodecs.fixedscaleoffset": ArrayToArray,
	"numcodecs.quantize":         ArrayToArray,
	"numcodecs.bitround":         ArrayToArray,
	"numcodecs.astype":           ArrayToArray,
	"numcodecs.packbits":         ArrayToArray,
	"numcodecs.categorize":       ArrayToArray,
	"numcodecs.zlib":             BytesToBytes,
	"numcodecs.gzip":             BytesToBytes,
	"numcodecs.bz2":              BytesToBytes,
	"numcodecs.lzma":             BytesToBytes,
	"numcodecs.lz4":              BytesToBytes,
	"numcodecs.shuffle":          BytesToBytes,
	"numcodecs.crc32":            BytesToBytes,
	"numcodecs.crc32c":           BytesToBytes,
	"numcodecs.adler32":          BytesToBytes,
	"numcodecs.fletcher32":       BytesToBytes,
	"numcodecs.jenkins_lookup3":  BytesToBytes,
}

// ClassOf returns the class of a codec name the format knows, or
// CodecUnknown.
func ClassOf(name string) CodecClass { return codecClasses[name] }

// v2Compressors are the numcodecs ids that are compressors (the last,
// bytes-to-bytes stage of a v2 chain) rather than filters.
var v2Compressors = map[string]bool{
	"blosc": true, "gzip": true, "zstd": true, "zlib": true, "bz2": true, "lzma": true, "lz4": true,
}

// validateCodecs checks a chain: every codec known (or skippable), array ->
// array codecs first, exactly one array -> bytes codec, bytes -> bytes
// codecs last, and the configurations this package interprets.
func validateCodecs(chain []CodecSpec, ndim int, d DataType, field string) error {
	stage := ArrayToArray
	seenAB := false
	for i, c := range chain {
		cls := ClassOf(c.Name)
		if cls == CodecUnknown {
			if c.MustUnderstand != nil && !*c.MustUnderstand {
				continue
			}
			return newError(ErrUnsupported, "%s[%d]: codec %q is not supported", field, i, c.Name)
		}
		if cls < stage {
			return newError(ErrInvalid, "%s[%d]: codec %q is out of order (array->array, then array->bytes, then bytes->bytes)", field, i, c.Name)
		}
		if cls == ArrayToBytes {
			if seenAB {
				return newError(ErrInvalid, "%s[%d]: a second array->bytes codec %q", field, i, c.Name)
			}
			seenAB = true
		}
		stage = cls
		if err := validateCodecConfig(c, ndim, d, field+"["+itoa(i)+"]"); err != nil {
			return err
		}
	}
	if !seenAB {
		return newError(ErrInvalid, "%s: no array->bytes codec (such as \"bytes\")", field)
	}
	return nil
}

func itoa(i int) string { return strconv.Itoa(i) }

func validateCodecConfig(c CodecSpec, ndim int, d DataType, field string) error {
	switch c.Name {
	case "bytes":
		var cfg struct {
			Endian *string `json:"endian"`
		}
		if len(c.Configuration) > 0 && json.Unmarshal(c.Configuration, &cfg) != nil {
			return newError(ErrInvalid, "%s: bytes configuration must be an object", field)
		}
		if cfg.Endian != nil && *cfg.Endian != "little" && *cfg.Endian != "big" {
			return newError(ErrInvalid, "%s: bytes endian must be \"little\" or \"big\", not %q", field, *cfg.Endian)
		}
		if cfg.Endian == nil && d.SwapUnit() > 1 {
			return newError(ErrInvalid, "%s: bytes endian is required for %s", field, d.Name)
		}
	case "transpose":
		var cfg struct {
			Order []int `json:"order"`
		}
		if json.Unmarshal(c.Configuration, &cfg) != nil || len(cfg.Order) != ndim {
			return newError(ErrInvalid, "%s: transpose order must be a permutation of %d dimensions", field, ndim)
		}
		seen := make([]bool, ndim)
		for _, o := range cfg.Order {
			if o < 0 || o >= ndim || seen[o] {
				return newError(ErrInvalid, "%s: transpose order must be a permutation of %d dimensions", field, ndim)
			}
			seen[o] = true
		}
	case "sharding_indexed":
		var cfg struct {
			ChunkShape  json.RawMessage `json:"chunk_shape"`
			Codecs      json.RawMessage `json:"codecs"`
			IndexCodecs json.RawMessage `json:"index_codecs"`
			IndexLoc    *string         `json:"index_location"`
		}
		if json.Unmarshal(c.Configuration, &cfg) != nil {
			return newError(ErrInvalid, "%s: sharding_indexed configuration must be an object", field)
		}
		cs, err := parseShape(cfg.ChunkShape, field+".chunk_shape", true)
		if err != nil {
			return err
		}
		if len(cs) != ndim {
			return newError(ErrInvalid, "%s.chunk_shape: has %d dimensions, array has %d", field, len(cs), ndim)
		}
		if cfg.IndexLoc != nil && *cfg.IndexLoc != "start" && *cfg.IndexLoc != "end" {
			return newError(ErrInvalid, "%s.index_location: must be \"start\" or \"end\"", field)
		}
		inner, err := parseCodecList(cfg.Codecs, field+".codecs")
		if err != nil {
			return err
		}
		if err := validateCodecs(inner, ndim, d, field+".codecs"); err != nil {
			return err
		}
		index, err := parseCodecList(cfg.IndexCodecs, field+".index_codecs")
		if err != nil {
			return err
		}
		if err := validateCodecs(index, ndim, MustDataType("uint64"), field+".index_codecs"); err != nil {
			return err
		}
	}
	return nil
}

// parseCodecList reads a v3 list of codecs, each an extension object or a
// short-hand name.
func parseCodecList(v json.RawMessage, field string) ([]CodecSpec, error) {
	var list []json.RawMessage
	if err := json.Unmarshal(v, &list); err != nil || list == nil {
		return nil, newError(ErrInvalid, "%s: must be a list of codecs", field)
	}
	out := make([]CodecSpec, len(list))
	for i, e := range list {
		ext, err := parseExtension(e, field+"["+itoa(i)+"]")
		if err != nil {
			return nil, err
		}
		out[i] = CodecSpec{Name: ext.Name, Configuration: ext.Configuration, MustUnderstand: ext.MustUnderstand}
	}
	return out, nil
}
