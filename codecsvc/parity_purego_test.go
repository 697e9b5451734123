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

// bloscParity is the same for our Blosc: its zstd, zlib and lz4hc
// streams (one per shuffled byte of the type) fall short of c-blosc's,
// most at low levels.
func bloscParity(cname string, level int) float64 {
	switch cname {
	case "zstd":
		return 0.70
	case "zlib":
		return 0.84
	case "lz4hc":
		return 0.90
	}
	return 0.95
}
