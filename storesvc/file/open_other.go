//go:build !linux

package file

import "os"

// beneath is empty where there is no openat2: os.Root opens.
type beneath struct{}

// openRead opens rel (a validated key's path) for reading.
func (s *Store) openRead(rel string) (*os.File, error) { return s.root.Open(rel) }

func (s *Store) closeBeneath() {}
