package controller

import (
	"fmt"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/config"
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
	// DefaultSize is used when a request gives no capacity.
	DefaultSize = gib
	// MaxSize is far beyond any real volume and well inside what RBD and
	// krbd handle; anything larger is a typo.
	MaxSize = int64(1) << 50
	// maxNameLen bounds request names (Kubernetes sends pvc-<uuid>).
	maxNameLen = 256
)

// checkCapabilities returns why the capabilities cannot be served, or nil.
func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return fmt.Errorf("volume capabilities are missing")
	}
	for _, c := range caps {
		if err := checkCapability(c); err != nil {
			return err
		}
	}
	return nil
}

func checkCapability(c *csi.VolumeCapability) error {
	if c == nil {
		return fmt.Errorf("a volume capability is empty")
	}
	mode := c.GetAccessMode().GetMode()
	if mode == csi.VolumeCapability_AccessMode_UNKNOWN {
		return fmt.Errorf("volume capability has no access mode")
	}
	if _, ok := csi.VolumeCapability_AccessMode_Mode_name[int32(mode)]; !ok {
		return fmt.Errorf("access mode %d is unknown", mode)
	}
	switch at := c.GetAccessType().(type) {
	case *csi.VolumeCapability_Block:
		return nil
	case *csi.VolumeCapability_Mount:
		fs := at.Mount.GetFsType()
		if fs == "" {
			fs = config.DefaultFsType
		}
		if !slices.Contains(config.FsTypes(), fs) {
			return fmt.Errorf("filesystem %.30q is not supported (choose one of %v)", fs, config.FsTypes())
		}
		if mode == csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER || mode == csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER {
			return fmt.Errorf("access mode %s needs volumeMode Block: ext4 and xfs cannot be mounted read-write on several nodes at once", mode)
		}
		readOnly := mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY || mode == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
		return config.CheckMountOptions(fs, at.Mount.GetMountFlags(), readOnly)
	default:
		return fmt.Errorf("volume capability has neither block nor mount access type")
	}
}

// isBlock reports whether any capability asks for raw block access.
func isBlock(caps ...*csi.VolumeCapability) bool {
	for _, c := range caps {
		if c.GetBlock() != nil {
			return true
		}
	}
	return false
}

// multiWriter reports whether several nodes may write the volume at once,
// which decides its default image features (config.VolumeFeatures).
func multiWriter(caps ...*csi.VolumeCapability) bool {
	for _, c := range caps {
		if c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER {
			return true
		}
	}
	return false
}

// sizeFor picks the image size for a capacity range: the request rounded
// up to whole MiB, within the limit. It returns a message for
// InvalidArgument (bad range) or OutOfRange (cannot be met).
func sizeFor(r *csi.CapacityRange) (size int64, invalid, outOfRange error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || lim < 0 {
		return 0, fmt.Errorf("capacity range must not be negative (required %d, limit %d)", req, lim), nil
	}
	if lim > 0 && req > lim {
		return 0, fmt.Errorf("required bytes %d exceed limit bytes %d", req, lim), nil
	}
	switch {
	case req == 0 && lim == 0:
		return DefaultSize, nil, nil
	case req == 0:
		size = min(DefaultSize, lim/mib*mib)
	default:
		if req > MaxSize {
			return 0, nil, fmt.Errorf("required bytes %d exceed the largest volume this driver creates (%d)", req, MaxSize)
		}
		size = (req + mib - 1) / mib * mib
	}
	if size == 0 || (lim > 0 && size > lim) {
		return 0, nil, fmt.Errorf("no whole number of MiB fits between required %d and limit %d bytes", req, lim)
	}
	return size, nil, nil
}

// fits reports whether an existing size satisfies a capacity range.
func fits(size int64, r *csi.CapacityRange) bool {
	return size >= r.GetRequiredBytes() && (r.GetLimitBytes() == 0 || size <= r.GetLimitBytes())
}
