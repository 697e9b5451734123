package codecsvc

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/zarrgate/zarrgate/zarr"
)

// Golden cases: every testdata/golden/*.json is a manifest
//
//	{"producer": "zarr-python 3.x / numcodecs 0.x", "cases": [case, ...]}
//
// and each case is one encoded chunk with what it decodes to:
//
//	name        a unique name
//	codecs      the chain, v3 form (v2 chains normalised as zarr.CodecSpec says)
//	data_type   a v3 data type name, or a v2-only one by its name
//	            without byte order ("U6": NumPy "<U6")
//	shape       the chunk shape
//	fill_value  hex of one element, little-endian (string types: the value's bytes)
//	encoded     file (next to the manifest) holding the stored bytes, or
//	encoded_hex the stored bytes inline
//	decoded     file holding the elements C-order, little-endian (numpy:
//	            a.astype(a.dtype.newbyteorder("<")).tobytes()), or
//	decoded_hex the same inline, or
//	strings     the elements of a string array (bytes arrays: base64)
//	exact       true when our encoder must reproduce encoded byte for byte
//	            (uncompressed chains; compressors may differ and still be valid)
//	input_hex   for lossy codecs (numcodecs quantize, fixedscaleoffset...):
//	            the elements the reference encoded to encoded, which decode
//	            to something else; with exact, our encoding of them must be
//	            encoded byte for byte
//
// Each case must decode to its elements, and our encoding of the elements
// must decode back to them.
type goldenCase struct {
	Name       string           `json:"name"`
	Codecs     []zarr.CodecSpec `json:"codecs"`
	DataType   string           `json:"data_type"`
	Shape      []int            `json:"shape"`
	FillValue  string           `json:"fill_value"`
	Encoded    string           `json:"encoded"`
	EncodedHex string           `json:"encoded_hex"`
	Decoded    string           `json:"decoded"`
	DecodedHex string           `json:"decoded_hex"`
	Strings    []string         `json:"strings"`
	Exact      bool             `json:"exact"`
	InputHex   string           `json:"input_hex"`
}

type goldenManifest struct {
	Producer string       `json:"producer"`
	Cases    []goldenCase `json:"cases"`
}

func (g goldenCase) load(t *testing.T, dir string) (ChunkSpec, []byte, Chunk) {
	t.Helper()
	dt, err := zarr.ParseDataType(g.DataType)
	if err != nil {
		var err2 error
		if dt, _, err2 = zarr.ParseV2DataType("<" + g.DataType); err2 != nil {
			t.Fatal(err)
		}
	}
	fill, err := hex.DecodeString(g.FillValue)
	if err != nil {
		t.Fatalf("fill_value: %v", err)
	}
	blob := func(file, hx string) []byte {
		if file != "" {
			b, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		b, err := hex.DecodeString(hx)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	spec := ChunkSpec{Shape: g.Shape, DataType: dt, FillValue: fill}
	want := Chunk{}
	if dt.VariableLength() {
		want.Offsets = []int64{0}
		for _, s := range g.Strings {
			v := []byte(s)
			if dt.Kind == zarr.KindBytes {
				if v, err = base64.StdEncoding.DecodeString(s); err != nil {
					t.Fatal(err)
				}
			}
			want.Data = append(want.Data, v...)
			want.Offsets = append(want.Offsets, int64(len(want.Data)))
		}
	} else {
		want.Data = blob(g.Decoded, g.DecodedHex)
	}
	return spec, blob(g.Encoded, g.EncodedHex), want
}

func TestGolden(t *testing.T) {
	manifests, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.json"))
	if len(manifests) == 0 {
		t.Skip("no golden manifests in testdata/golden")
	}
	for _, m := range manifests {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		var man goldenManifest
		if err := json.Unmarshal(b, &man); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		for _, g := range man.Cases {
			t.Run(filepath.Base(m)+"/"+g.Name, func(t *testing.T) {
				spec, encoded, want := g.load(t, filepath.Dir(m))
				c, err := NewChain(g.Codecs, spec)
				if err != nil {
					t.Fatal(err)
				}
				got, err := c.Decode(encoded)
				if err != nil {
					t.Fatalf("decode (%s): %v", man.Producer, err)
				}
				if !bytes.Equal(got.Data, want.Data) || !slices.Equal(got.Offsets, want.Offsets) {
					t.Fatalf("decode (%s) = %x %v\nwant %x %v", man.Producer, got.Data, got.Offsets, want.Data, want.Offsets)
				}
				enc, err := c.Encode(want)
				if err != nil {
					t.Fatalf("encode: %v", err)
				}
				// A lossy chain's reference encoded the input, not what it
				// decodes to: the input's encoding is compared below.
				if g.Exact && g.InputHex == "" && !bytes.Equal(enc, encoded) {
					t.Errorf("encode = %x\nwant     %x", enc, encoded)
				}
				if g.InputHex != "" {
					in, err := hex.DecodeString(g.InputHex)
					if err != nil {
						t.Fatal(err)
					}
					lossy, err := c.Encode(Chunk{Data: in})
					if err != nil {
						t.Fatalf("encode input: %v", err)
					}
					if g.Exact && !bytes.Equal(lossy, encoded) {
						t.Errorf("encode input = %x\nwant           %x", lossy, encoded)
					}
				}
				again, err := c.Decode(enc)
				if err != nil || !bytes.Equal(again.Data, want.Data) || !slices.Equal(again.Offsets, want.Offsets) {
					t.Errorf("our encoding does not decode back: %v", err)
				}
			})
		}
	}
}
