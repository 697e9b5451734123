package storesvc

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/zarrgate/zarrgate/errs"
)

// MaxKeyLen is the longest key, in bytes, that the portable layer accepts.
const MaxKeyLen = 1024

// MaxSegmentLen is the longest path segment of a key, in bytes: the longest
// file name of common file systems (ext4, XFS, btrfs, APFS, ZFS), so that
// every valid key is a valid path in a file store.
const MaxSegmentLen = 255

// ReservedPrefix starts the names that stores use for their own files (the
// file store's temporary files): no key segment may start with it, so that
// no call can read, overwrite, erase or list such a file.
const ReservedPrefix = ".zarrgate-tmp-"

// ValidateKey checks that key is a portable store key: valid UTF-8, at most
// MaxKeyLen bytes, "/"-separated segments of at most MaxSegmentLen bytes none
// of which is empty, "." or ".." or starts with ReservedPrefix, and no
// control characters. Such a key maps to a path inside a store's
// root on every backend. The error matches ErrInvalidKey and names the key.
func ValidateKey(key string) error {
	if key == "" {
		return errs.New(errs.InvalidArgument, "invalid key: empty")
	}
	if len(key) > MaxKeyLen {
		return errs.New(errs.InvalidArgument, "invalid key %.40q...: %d bytes, at most %d allowed", key, len(key), MaxKeyLen)
	}
	if !utf8.ValidString(key) {
		return errs.New(errs.InvalidArgument, "invalid key %q: not valid UTF-8", key)
	}
	for _, r := range key {
		if unicode.IsControl(r) {
			return errs.New(errs.InvalidArgument, "invalid key %q: contains control character %U", key, r)
		}
	}
	if key[0] == '/' || key[len(key)-1] == '/' {
		return errs.New(errs.InvalidArgument, "invalid key %q: must not start or end with \"/\"", key)
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return errs.New(errs.InvalidArgument, "invalid key %q: empty path segment", key)
		case ".", "..":
			return errs.New(errs.InvalidArgument, "invalid key %q: %q segment not allowed", key, seg)
		}
		if len(seg) > MaxSegmentLen {
			return errs.New(errs.InvalidArgument, "invalid key %.80q...: a path segment of %d bytes, at most %d allowed", key, len(seg), MaxSegmentLen)
		}
		if strings.HasPrefix(seg, ReservedPrefix) {
			return errs.New(errs.InvalidArgument, "invalid key %q: segments starting with %q are reserved for the store's temporary files", key, ReservedPrefix)
		}
	}
	return nil
}

// ValidatePrefix checks that prefix is "" (the whole store) or a valid key
// followed by "/".
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if !strings.HasSuffix(prefix, "/") {
		return errs.New(errs.InvalidArgument, "invalid prefix %q: must be empty or end with \"/\"", prefix)
	}
	if err := ValidateKey(strings.TrimSuffix(prefix, "/")); err != nil {
		return errs.New(errs.InvalidArgument, "invalid prefix %q: %v", prefix, err)
	}
	return nil
}
