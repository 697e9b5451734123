package codecsvc

// SetMaxSharedEncoded sets how many encoded bytes a batch may name in
// shared memory, until the returned function restores it.
func SetMaxSharedEncoded(n uint64) (restore func()) {
	old := maxSharedEncoded
	maxSharedEncoded = n
	return func() { maxSharedEncoded = old }
}
