package harness

import (
	"os"
	"testing"
	"time"
)

// TimedWrite writes n bytes to a new file under dir, waits until they
// reached the device (fsync), removes the file, and returns how long the
// write and the fsync took: what the QoS tests compare capped and not.
func TimedWrite(t *testing.T, dir string, n int) time.Duration {
	t.Helper()
	f, err := os.CreateTemp(dir, "timed-")
	Must(t, err, "create")
	defer os.Remove(f.Name())
	defer f.Close()
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i*7 + i>>9) // not zeroes, which a filesystem or librbd might skip
	}
	start := time.Now()
	_, err = f.Write(data)
	Must(t, err, "write")
	Must(t, f.Sync(), "fsync")
	return time.Since(start)
}
