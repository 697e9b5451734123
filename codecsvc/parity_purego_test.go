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
