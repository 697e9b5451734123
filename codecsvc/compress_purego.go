//go:build !cgocodecs

package codecsvc

// CCodecs names the C libraries this build uses: none, the default
// build is pure Go (see compress_cgo.go for the cgocodecs build).
const CCodecs = ""
