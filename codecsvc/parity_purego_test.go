//go:build !cgocodecs

package codecsvc

// zstdParity is the least share of libzstd's ratio the pure-Go zstd
// encoder reaches at a level on the benchmark data: levels 16 and up
// (libzstd's optimal parsing, btultra) find matches in float data that
// klauspost's best level does not.
func zstdParity(level int) float64 {
	if level >= 16 {
		return 0.70
	}
	return 0.95
}

// bloscZstdParity: Blosc's zstd blocks, klauspost's encoder at libzstd's
// levels 1–22 (c-blosc's 2×clevel−1), fall short of c-blosc's most.
func bloscZstdParity(int) float64 { return 0.70 }
