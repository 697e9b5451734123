//go:build !linux

package shm

import (
	"io/fs"
	"os"
)

func memfd(int64, bool) (*os.File, error) { return nil, ErrUnsupported }

func mapFile(*os.File, int64, bool) ([]byte, error) { return nil, ErrUnsupported }

func unmap([]byte) error { return nil }

func openSegment(string, bool) (*os.File, error) { return nil, ErrUnsupported }

// Supported reports whether this platform has shared memory segments.
const Supported = false

func anonymous(string, *os.File, fs.FileInfo) error { return ErrUnsupported }
