// Package blockdev reads facts about block devices that the mapper and the
// node both need.
package blockdev

import (
	"io"
	"os"
)

// Size returns the size in bytes of a block device (or of a file).
func Size(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	// Seeking to the end works for block devices, where Stat says 0.
	return f.Seek(0, io.SeekEnd)
}
