//go:build !linux

package file

import (
	"io"
	"os"
)

// beneath is empty where there is no openat2: os.Root opens.
type beneath struct{}

// openRead opens rel (a validated key's path) for reading.
func (s *Store) openRead(rel string) (*os.File, error) { return s.root.Open(rel) }

func (s *Store) closeBeneath() {}

// readVecAt reads bufs in order from f at off, one ReadAt each.
func readVecAt(f *os.File, bufs [][]byte, off int64) (int64, error) {
	var n int64
	for _, b := range bufs {
		k, err := f.ReadAt(b, off+n)
		n += int64(k)
		if err == io.EOF && k == len(b) {
			err = nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
