//go:build cgocodecs

package codecsvc

// zstdParity: the cgocodecs build encodes zstd with the system's libzstd.
// At levels 16 and up, Debian 12's libzstd 1.5.4 compresses e2e's
// benchmark chunk to 0.77 of what numcodecs' bundled libzstd 1.5.6 does.
func zstdParity(level int) float64 {
	if level >= 16 {
		return 0.75
	}
	return 0.95
}

// bloscZstdParity: Blosc's zstd blocks go through libzstd too, as in
// c-blosc; clevel 9 is zstd's level 22, where zstdParity's gap between
// libzstd versions applies.
func bloscZstdParity(level int) float64 {
	if level == 9 {
		return zstdParity(22)
	}
	return zstdParity(2*level - 1)
}
