//go:build !linux

package shm

// NewDest is not implemented on this platform.
func NewDest(int64) (*Dest, error) { return nil, ErrUnsupported }

// OpenDest is not implemented on this platform.
func OpenDest(int, int, int64, []byte) (*DestMap, error) {
	return nil, refuse("%v", ErrUnsupported)
}

// OpenDest is not implemented on this platform.
func (*DestCache) OpenDest(int, int, int64, []byte) (*DestMap, error) {
	return nil, refuse("%v", ErrUnsupported)
}

// DestSupported reports whether this platform has shared destinations.
const DestSupported = false
