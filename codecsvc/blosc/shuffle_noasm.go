//go:build !amd64 || purego

package blosc

// Without assembly (other architectures, or the purego build tag) the Go
// code does all the work.

var simdLevel = 0

func simdLevels() []int { return []int{0} }

func unshuffleSIMD(planes [][]byte, dst []byte, n int) int { return 0 }

func shuffleSIMD(typesize int, src, dst []byte, n int) int { return 0 }

func trans8x8SIMD(b []byte) int { return 0 }
