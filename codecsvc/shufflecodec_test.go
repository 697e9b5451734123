package codecsvc

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestShuffleCodecLayout checks numcodecs.shuffle against its definition
// (byte k of element i at k*n+i, a partial last element left in place) at
// lengths the assembly kernels handle, with tails.
func TestShuffleCodecLayout(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for size := 1; size <= 17; size++ {
		for _, length := range []int{0, 1, size*64 + 3, size * 1000, 4099} {
			in := make([]byte, length)
			for i := range in {
				in[i] = byte(r.Uint32())
			}
			n := length / size
			want := bytes.Clone(in)
			for i := range n {
				for k := range size {
					want[k*n+i] = in[i*size+k]
				}
			}
			c := shuffleCodec{size}
			enc, err := c.Encode(in)
			if err != nil || !bytes.Equal(enc, want) {
				t.Fatalf("elementsize %d, %d bytes: encoding differs from the definition (%v)", size, length, err)
			}
			dec, err := c.Decode(enc, -1)
			if err != nil || !bytes.Equal(dec, in) {
				t.Fatalf("elementsize %d, %d bytes: decoding does not restore the input (%v)", size, length, err)
			}
		}
	}
}
