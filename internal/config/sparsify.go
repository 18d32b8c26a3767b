package config

import "fmt"

// ParamSparsify is a mutable parameter (a VolumeAttributesClass's, never
// a StorageClass's): a new value asks the controller once to give the
// detached volume's zero-filled blocks back to Ceph (rbd sparsify). The
// value is the request's name, a date say; the same value again asks
// nothing more.
const ParamSparsify = "sparsify"

// ValidSparsifyRequest checks a sparsify value: 1 to 63 letters, digits,
// '-', '_' and '.', so that it fits a label value and an image metadata
// value alike.
func ValidSparsifyRequest(s string) error {
	if len(s) == 0 || len(s) > 63 {
		return fmt.Errorf("mutable parameter %s: want 1 to 63 characters naming the request (like 2026-11-25), have %d", ParamSparsify, len(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("mutable parameter %s: %.70q: only letters, digits, '-', '_' and '.' are allowed", ParamSparsify, s)
		}
	}
	return nil
}
