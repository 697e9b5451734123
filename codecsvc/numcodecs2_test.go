package codecsvc

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/testenv"
	"github.com/zarrgate/zarrgate/zarr"
)

// numcodecsCases are chains of the numcodecs codecs with numcodecs' own
// configuration (id included, as gen_numcodecs.py verify builds them) and
// the array they encode.
var numcodecsCases = []struct {
	name, config, dtype string
	n                   int
	array               bool // an array-to-array codec (else bytes-to-bytes)
	deterministic       bool // numcodecs' encoding must be ours
}{
	{"fso-f8", `{"id":"fixedscaleoffset","offset":-3.5,"scale":17.25,"dtype":"<f8","astype":"<i4"}`, "float64", 500, true, true},
	{"fso-f4", `{"id":"fixedscaleoffset","offset":2,"scale":0.37,"dtype":"<f4","astype":"<i2"}`, "float32", 500, true, true},
	{"fso-f4-f4", `{"id":"fixedscaleoffset","offset":0.3,"scale":7,"dtype":"<f4"}`, "float32", 500, true, true},
	{"fso-i8", `{"id":"fixedscaleoffset","offset":9,"scale":5,"dtype":"<i8","astype":"<i2"}`, "int64", 300, true, true},
	{"fso-u2", `{"id":"fixedscaleoffset","offset":1,"scale":0.3,"dtype":"<u2","astype":"|u1"}`, "uint16", 300, true, true},
	{"fso-i2-f8", `{"id":"fixedscaleoffset","offset":1.25,"scale":3,"dtype":"<i2","astype":"<f8"}`, "int16", 300, true, true},
	{"quantize-f8", `{"id":"quantize","digits":3,"dtype":"<f8","astype":"<f8"}`, "float64", 500, true, true},
	{"quantize-f4", `{"id":"quantize","digits":1,"dtype":"<f4","astype":"<f4"}`, "float32", 500, true, true},
	{"bitround-f4", `{"id":"bitround","keepbits":7}`, "float32", 500, true, true},
	{"bitround-f8", `{"id":"bitround","keepbits":30}`, "float64", 500, true, true},
	{"bitround-f2", `{"id":"bitround","keepbits":2}`, "float16", 500, true, true},
	{"astype-f8-f2", `{"id":"astype","encode_dtype":"<f2","decode_dtype":"<f8"}`, "float64", 500, true, true},
	{"astype-f4-u1", `{"id":"astype","encode_dtype":"|u1","decode_dtype":"<f4"}`, "float32", 500, true, true},
	{"astype-i8-f4", `{"id":"astype","encode_dtype":"<f4","decode_dtype":"<i8"}`, "int64", 500, true, true},
	{"astype-u4-i2", `{"id":"astype","encode_dtype":"<i2","decode_dtype":"<u4"}`, "uint32", 500, true, true},
	{"packbits", `{"id":"packbits"}`, "bool", 1001, true, true},
	{"categorize", `{"id":"categorize","labels":["ü","a","","bb"],"dtype":"|O","astype":"<u2"}`, "string", 50, true, true},
	{"crc32", `{"id":"crc32"}`, "uint16", 333, false, true},
	{"crc32c-start", `{"id":"crc32c","location":"start"}`, "uint16", 333, false, true},
	{"adler32-end", `{"id":"adler32","location":"end"}`, "int32", 1000, false, true},
	{"fletcher32", `{"id":"fletcher32"}`, "uint8", 1001, false, true},
	{"jenkins", `{"id":"jenkins_lookup3","initval":99}`, "uint8", 1001, false, true},
	{"lzma", `{"id":"lzma"}`, "int32", 50000, false, false},
	{"lzma-sha256", `{"id":"lzma","check":10,"preset":1}`, "float64", 3000, false, false},
	{"lzma-none", `{"id":"lzma","check":0}`, "uint8", 300000, false, false},
	{"lzma-alone", `{"id":"lzma","format":2}`, "int16", 50000, false, false},
	{"lzma-raw2", `{"id":"lzma","format":3,"filters":[{"id":33,"dict_size":65536}]}`, "int16", 50000, false, false},
	{"lzma-raw1", `{"id":"lzma","format":3,"filters":[{"id":4611686018427387905,"lc":0,"lp":2,"pb":2}]}`, "int16", 50000, false, false},
}

// chainOf is the v3 chain of a numcodecs configuration.
func chainOf(t testing.TB, config string, array bool) []zarr.CodecSpec {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(config), &m); err != nil {
		t.Fatal(err)
	}
	var id string
	json.Unmarshal(m["id"], &id)
	delete(m, "id")
	cfg, _ := json.Marshal(m)
	c := zarr.CodecSpec{Name: "numcodecs." + id, Configuration: cfg}
	le := zarr.CodecSpec{Name: "bytes", Configuration: json.RawMessage(`{"endian":"little"}`)}
	if array {
		return []zarr.CodecSpec{c, le}
	}
	return []zarr.CodecSpec{le, c}
}

// randomChunk holds noisy values (random bits for lzma's incompressible
// case, random strings from a few for categorize).
func randomChunk(r *rand.Rand, spec ChunkSpec) Chunk {
	n := spec.Elements()
	dt := spec.DataType
	switch dt.Kind {
	case zarr.KindString:
		c := Chunk{Offsets: []int64{0}}
		for range n {
			c.Data = append(c.Data, []string{"ü", "a", "", "bb", "other"}[r.IntN(5)]...)
			c.Offsets = append(c.Offsets, int64(len(c.Data)))
		}
		return c
	case zarr.KindBool:
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(2))
		}
		return Chunk{Data: b}
	}
	b := make([]byte, n*dt.Size)
	for i := range n {
		f := math.Sin(float64(i)/40)*300 + r.NormFloat64()*20
		if dt.Kind == zarr.KindFloat {
			storeFloat(b[i*dt.Size:], dt, f)
		} else if dt.Size == 1 && n > 100000 {
			b[i] = byte(r.Uint32()) // incompressible: LZMA2's stored chunks
		} else {
			storeBits(b[i*dt.Size:], dt, int64(math.Abs(f)))
		}
	}
	return Chunk{Data: b}
}

// TestNumcodecsDecodesOurs encodes random chunks with our codecs and has
// numcodecs (ZARRGATE_PYTHON, the venv of scripts/test-python.sh) decode
// them to what we decode them to, and encode the input to our bytes
// where it is deterministic (all but lzma).
func TestNumcodecsDecodesOurs(t *testing.T) {
	py := testenv.Python(t)
	type verifyCase struct {
		Name         string          `json:"name"`
		Config       json.RawMessage `json:"config"`
		EncodedHex   string          `json:"encoded_hex"`
		EncodedDtype string          `json:"encoded_dtype,omitempty"`
		DecodedHex   string          `json:"decoded_hex,omitempty"`
		Strings      []string        `json:"strings,omitempty"`
		InputHex     *string         `json:"input_hex,omitempty"`
		InputDtype   string          `json:"input_dtype,omitempty"`
	}
	numpy := map[string]string{"bool": "|b1", "int16": "<i2", "int32": "<i4", "int64": "<i8", "uint8": "|u1", "uint16": "<u2",
		"uint32": "<u4", "float16": "<f2", "float32": "<f4", "float64": "<f8", "string": "|O"}
	r := rand.New(rand.NewPCG(13, 8))
	var cases []verifyCase
	for _, tc := range numcodecsCases {
		spec := ChunkSpec{Shape: []int{tc.n}, DataType: zarr.MustDataType(tc.dtype)}
		c, err := NewChain(chainOf(t, tc.config, tc.array), spec)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		in := randomChunk(r, spec)
		enc, err := c.Encode(in)
		if err != nil {
			t.Fatalf("%s: encode: %v", tc.name, err)
		}
		dec, err := c.Decode(enc)
		if err != nil {
			t.Fatalf("%s: decode: %v", tc.name, err)
		}
		v := verifyCase{Name: tc.name, Config: json.RawMessage(tc.config), EncodedHex: hex.EncodeToString(enc)}
		if tc.array {
			v.EncodedDtype = numpy[c.abIn.DataType.Name]
		}
		if spec.DataType.Kind == zarr.KindString {
			for i := range len(dec.Offsets) - 1 {
				v.Strings = append(v.Strings, string(dec.Data[dec.Offsets[i]:dec.Offsets[i+1]]))
			}
		} else {
			v.DecodedHex = hex.EncodeToString(dec.Data)
			if tc.deterministic {
				h := hex.EncodeToString(in.Data)
				v.InputHex, v.InputDtype = &h, numpy[tc.dtype]
			}
		}
		cases = append(cases, v)
	}
	b, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ours.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, "-W", "ignore", filepath.Join("testdata", "golden", "gen_numcodecs.py"), "verify", file).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("numcodecs disagrees: %v", err)
	}
}

// TestNumcodecsRoundTrip: every codec decodes what it encodes (lossless
// ones to the input), and a corrupted byte of a checksummed chunk is
// DataLoss.
func TestNumcodecsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 13))
	for _, tc := range numcodecsCases {
		spec := ChunkSpec{Shape: []int{tc.n}, DataType: zarr.MustDataType(tc.dtype)}
		c, err := NewChain(chainOf(t, tc.config, tc.array), spec)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		in := randomChunk(r, spec)
		enc, err := c.Encode(in)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		dec, err := c.Decode(enc)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if _, err := c.Encode(dec); err != nil {
			t.Fatal(err)
		}
		// (Lossy codecs need not be idempotent: integers scaled by a
		// float truncate, categorize maps unknown strings to "".)
		if !tc.array {
			if string(dec.Data) != string(in.Data) {
				t.Errorf("%s: lossless codec changed the data", tc.name)
			}
			if strings.Contains(tc.config, `"check":0`) {
				continue // stored LZMA2 chunks of random data, no check
			}
			bad := []byte(string(enc))
			bad[len(bad)/2] ^= 0x10
			if _, err := c.Decode(bad); !errors.Is(err, errs.DataLoss) {
				t.Errorf("%s: a corrupted chunk decodes with %v, want DataLoss", tc.name, err)
			}
		}
	}
}

// TestNumcodecsLZMABounded: an xz or .lzma header claiming a huge
// dictionary or size costs nothing, and output beyond the chunk fails.
func TestNumcodecsLZMABounded(t *testing.T) {
	for _, format := range []int{1, 2} {
		spec := ChunkSpec{Shape: []int{4096}, DataType: zarr.MustDataType("uint8")}
		big := ChunkSpec{Shape: []int{1 << 20}, DataType: zarr.MustDataType("uint8")}
		cfg := `[{"name":"bytes"},{"name":"numcodecs.lzma","configuration":{"format":` + string(rune('0'+format)) + `}}]`
		enc, err := chain(t, cfg, big).Encode(Chunk{Data: make([]byte, 1<<20)})
		if err != nil {
			t.Fatal(err)
		}
		small := chain(t, cfg, spec)
		if _, err := small.Decode(enc); !errors.Is(err, errs.DataLoss) {
			t.Errorf("format %d: 1 MiB into a 4 KiB chunk: %v, want DataLoss", format, err)
		}
		// A declared 1.5 GiB dictionary: decoding must not allocate it.
		ok, _ := small.Encode(Chunk{Data: make([]byte, 4096)})
		if format == 2 {
			binary.LittleEndian.PutUint32(ok[1:], 1536<<20)
		} else {
			ok = xzWithDict(t, ok, 40)
		}
		a0 := heapAlloc()
		if _, err := small.Decode(ok); err != nil {
			t.Fatalf("format %d: %v", format, err)
		}
		if a := heapAlloc() - a0; a > 4<<20 {
			t.Errorf("format %d: decoding 4 KiB with a 1.5 GiB dictionary declared allocated %d KiB", format, a>>10)
		}
	}
}

// xzWithDict rewrites the LZMA2 dictionary byte of an xz stream's first
// block header (and its CRC32).
func xzWithDict(t *testing.T, b []byte, dict byte) []byte {
	b = []byte(string(b))
	hs := (int(b[12]) + 1) * 4
	h := b[12 : 12+hs]
	i := strings.Index(string(h), "\x21\x01")
	if i < 0 {
		t.Fatal("no LZMA2 filter in the block header")
	}
	h[i+2] = dict
	binary.LittleEndian.PutUint32(h[hs-4:], crc32IEEE(h[:hs-4]))
	return b
}

// TestNumcodecsConfigErrors: unsupported configurations are
// InvalidArgument naming the field.
func TestNumcodecsConfigErrors(t *testing.T) {
	for _, tc := range []struct{ codecs, dtype, field string }{
		{`[{"name":"numcodecs.fixedscaleoffset","configuration":{"scale":1}},{"name":"bytes"}]`, "float64", "configuration.offset"},
		{`[{"name":"numcodecs.fixedscaleoffset","configuration":{"offset":0,"scale":1,"dtype":"<f4"}},{"name":"bytes"}]`, "float64", "configuration.dtype"},
		{`[{"name":"numcodecs.fixedscaleoffset","configuration":{"offset":300,"scale":1,"dtype":"|u1"}},{"name":"bytes"}]`, "uint8", "configuration.offset"},
		{`[{"name":"numcodecs.fixedscaleoffset","configuration":{"offset":0,"scale":1,"astype":"<c8"}},{"name":"bytes"}]`, "float64", "configuration.astype"},
		{`[{"name":"numcodecs.quantize","configuration":{"digits":2}},{"name":"bytes"}]`, "int32", "configuration.dtype"},
		{`[{"name":"numcodecs.quantize","configuration":{"digits":1.5}},{"name":"bytes"}]`, "float32", "configuration.digits"},
		{`[{"name":"numcodecs.bitround","configuration":{"keepbits":24}},{"name":"bytes"}]`, "float32", "configuration.keepbits"},
		{`[{"name":"numcodecs.astype","configuration":{"decode_dtype":"<f8"}},{"name":"bytes"}]`, "float64", "configuration.encode_dtype"},
		{`[{"name":"numcodecs.packbits"},{"name":"bytes"}]`, "uint8", "packbits packs bool"},
		{`[{"name":"numcodecs.categorize","configuration":{"labels":["a"],"dtype":"<U2"}},{"name":"bytes"}]`, "string", "configuration.dtype"},
		{`[{"name":"numcodecs.categorize","configuration":{"labels":["a"],"astype":"<f4"}},{"name":"bytes"}]`, "string", "configuration.astype"},
		{`[{"name":"bytes"},{"name":"numcodecs.adler32","configuration":{"location":"middle"}}]`, "uint8", "configuration.location"},
		{`[{"name":"bytes"},{"name":"numcodecs.jenkins_lookup3","configuration":{"prefix":"YQ=="}}]`, "uint8", "configuration.prefix"},
		{`[{"name":"bytes"},{"name":"numcodecs.lzma","configuration":{"format":4}}]`, "uint8", "configuration.format"},
		{`[{"name":"bytes"},{"name":"numcodecs.lzma","configuration":{"check":2}}]`, "uint8", "configuration.check"},
		{`[{"name":"bytes"},{"name":"numcodecs.lzma","configuration":{"format":3}}]`, "uint8", "configuration.filters"},
		{`[{"name":"bytes"},{"name":"numcodecs.lzma","configuration":{"format":3,"filters":[{"id":3}]}}]`, "uint8", "configuration.filters[0].id"},
		{`[{"name":"bytes"},{"name":"numcodecs.lzma","configuration":{"preset":10}}]`, "uint8", "configuration.preset"},
	} {
		var cs []zarr.CodecSpec
		if err := json.Unmarshal([]byte(tc.codecs), &cs); err != nil {
			t.Fatal(err)
		}
		_, err := NewChain(cs, ChunkSpec{Shape: []int{8}, DataType: zarr.MustDataType(tc.dtype)})
		if !errors.Is(err, errs.InvalidArgument) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s on %s: %v, want InvalidArgument naming %s", tc.codecs, tc.dtype, err, tc.field)
		}
	}
}

func crc32IEEE(b []byte) uint32 { return crc32.ChecksumIEEE(b) }

// Fuzz targets (fuzzDecoder in fuzz_test.go: no panic, client-input error
// codes only, allocation bounded by the chunk).
func FuzzDecodeFixedScaleOffset(f *testing.F) {
	fuzzDecoder(f, `[{"name":"numcodecs.fixedscaleoffset","configuration":{"offset":1000,"scale":10,"dtype":"<f8","astype":"|u1"}},`+le+`]`, "float64", []int{16})
}
func FuzzDecodeQuantize(f *testing.F) {
	fuzzDecoder(f, `[{"name":"numcodecs.quantize","configuration":{"digits":2,"dtype":"<f4"}},`+le+`,{"name":"numcodecs.adler32"}]`, "float32", []int{16})
}
func FuzzDecodeBitRound(f *testing.F) {
	fuzzDecoder(f, `[{"name":"numcodecs.bitround","configuration":{"keepbits":5}},`+le+`,{"name":"numcodecs.fletcher32"}]`, "float32", []int{16})
}
func FuzzDecodeAsType(f *testing.F) {
	fuzzDecoder(f, `[{"name":"numcodecs.astype","configuration":{"encode_dtype":"<f2","decode_dtype":"<f8"}},`+le+`]`, "float64", []int{16})
}
func FuzzDecodePackBits(f *testing.F) {
	fuzzDecoder(f, `[{"name":"numcodecs.packbits"},`+le+`,{"name":"numcodecs.jenkins_lookup3"}]`, "bool", []int{3, 7})
}
func FuzzDecodeCategorize(f *testing.F) {
	fuzzDecoder(f, `[{"name":"numcodecs.categorize","configuration":{"labels":["a","bb"],"dtype":"|O"}},`+le+`]`, "string", []int{12})
}
func FuzzDecodeNumcodecsCRC32(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"numcodecs.crc32"}]`, "uint16", []int{10})
}
func FuzzDecodeLZMA(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"numcodecs.lzma"}]`, "int32", []int{64})
}
func FuzzDecodeLZMAAlone(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"numcodecs.lzma","configuration":{"format":2}}]`, "int32", []int{64})
}
func FuzzDecodeLZMARaw(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"numcodecs.lzma","configuration":{"format":3,"filters":[{"id":33}]}}]`, "int32", []int{64})
}
func FuzzDecodeLZMARaw1(f *testing.F) {
	fuzzDecoder(f, `[`+le+`,{"name":"numcodecs.lzma","configuration":{"format":3,"filters":[{"id":4611686018427387905}]}}]`, "int32", []int{64})
}
