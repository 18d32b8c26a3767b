package blockdev

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSizeOfAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(path, make([]byte, 12345), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := Size(path); err != nil || got != 12345 {
		t.Fatalf("Size = %d, %v; want 12345", got, err)
	}
}

func TestSizeOfMissingPath(t *testing.T) {
	if _, err := Size(filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Size of a missing path: %v, want ErrNotExist", err)
	}
}
