package main

import (
	"fmt"
	"os"

	"github.com/rbdcsi/rbdcsi/internal/kms"
)

// maxKMSConfigBytes bounds the KMS configuration file: a few entries.
const maxKMSConfigBytes = 64 << 10

// loadKMSConfig reads --kms-config; "" is no KMS at all, so encrypted
// classes are refused rather than guessed at.
func loadKMSConfig(path string) (kms.Config, error) {
	if path == "" {
		return nil, nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--kms-config: %w", err)
	}
	if st.Size() > maxKMSConfigBytes {
		return nil, fmt.Errorf("--kms-config %s: %d bytes, more than %d", path, st.Size(), maxKMSConfigBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--kms-config: %w", err)
	}
	c, err := kms.ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("--kms-config %s: %w", path, err)
	}
	return c, nil
}
