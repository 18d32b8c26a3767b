package mapper

import (
	"context"
	"fmt"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/blockdev"
)

// pollInterval paces the waits below; sizes and mounts settle in
// milliseconds to seconds.
const pollInterval = 100 * time.Millisecond

// waitDeviceSize polls until the device is at least minBytes (calling
// refresh first each round when given) or ctx ends, and returns the size.
func waitDeviceSize(ctx context.Context, device string, minBytes int64, refresh func() error) (int64, error) {
	for {
		if refresh != nil {
			if err := refresh(); err != nil {
				return 0, err
			}
		}
		size, err := blockdev.Size(device)
		if err != nil {
			return 0, err
		}
		if size >= minBytes {
			return size, nil
		}
		select {
		case <-ctx.Done():
			return size, fmt.Errorf("device %s is still %d bytes, expected at least %d: %w", device, size, minBytes, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}
