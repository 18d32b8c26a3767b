package node

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// maxPathLen is PATH_MAX; CSI asks for at least 128 bytes.
const maxPathLen = 4096

// checkPath accepts an absolute, clean path: no "..", no "." or "//"
// detours, nothing the kernel would resolve differently from how it reads.
func checkPath(what, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%s is missing", what)
	case len(p) > maxPathLen:
		return fmt.Errorf("%s is longer than %d bytes", what, maxPathLen)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%s holds a NUL byte", what)
	case !filepath.IsAbs(p):
		return fmt.Errorf("%s %q is not absolute", what, p)
	case filepath.Clean(p) != p:
		// Clean drops "..", "." and doubled or trailing slashes; an
		// absolute path equal to its Clean form has no ".." left.
		return fmt.Errorf("%s %q is not clean (it should read %q)", what, p, filepath.Clean(p))
	case p == "/":
		return fmt.Errorf("%s must not be /", what)
	}
	return nil
}

// parseCapability reduces a volume capability to what the node acts on.
func parseCapability(c *csi.VolumeCapability) (capSpec, error) {
	if c == nil {
		return capSpec{}, fmt.Errorf("volume capability is missing")
	}
	mode := c.GetAccessMode().GetMode()
	name, known := csi.VolumeCapability_AccessMode_Mode_name[int32(mode)]
	if mode == csi.VolumeCapability_AccessMode_UNKNOWN || !known {
		return capSpec{}, fmt.Errorf("volume capability has no valid access mode")
	}
	switch at := c.GetAccessType().(type) {
	case *csi.VolumeCapability_Block:
		return capSpec{Block: true, AccessMode: name}, nil
	case *csi.VolumeCapability_Mount:
		fs := at.Mount.GetFsType()
		if fs == "" {
			fs = config.DefaultFsType
		}
		if !slices.Contains(config.FsTypes(), fs) {
			return capSpec{}, fmt.Errorf("filesystem %.30q is not supported (choose one of %s)", fs, strings.Join(config.FsTypes(), ", "))
		}
		if mode == csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER || mode == csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER {
			return capSpec{}, fmt.Errorf("access mode %s needs volumeMode Block: ext4 and xfs cannot be mounted read-write on several nodes at once", name)
		}
		if at.Mount.GetVolumeMountGroup() != "" {
			return capSpec{}, fmt.Errorf("volume_mount_group is not supported (the node does not advertise VOLUME_MOUNT_GROUP)")
		}
		flags := at.Mount.GetMountFlags()
		if err := checkMountFlags(flags); err != nil {
			return capSpec{}, err
		}
		spec := capSpec{FsType: fs, MountFlags: slices.Clone(flags), AccessMode: name}
		if err := config.CheckMountOptions(fs, flags, spec.readerOnly()); err != nil {
			return capSpec{}, err
		}
		return spec, nil
	default:
		return capSpec{}, fmt.Errorf("volume capability has neither block nor mount access type")
	}
}

// readerOnly reports whether the access mode allows no writer at all.
func (c capSpec) readerOnly() bool {
	return c.AccessMode == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY.String() ||
		c.AccessMode == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY.String()
}

// maxMountFlags bounds the list; real ones hold a handful.
const maxMountFlags = 32

// blockedMountOptions would change what mount(8) does rather than how the
// filesystem behaves: mount another source, move or remount something,
// set up a loop device, run a helper or create directories.
var blockedMountOptions = map[string]bool{
	"bind": true, "rbind": true, "move": true, "remount": true, "loop": true,
	"offset": true, "sizelimit": true, "encryption": true, "helper": true,
	"user": true, "users": true, "owner": true, "group": true, "defaults": true,
}

// checkMountFlags keeps each flag one option: mount(8) joins them with
// commas into one -o string, so a flag holding ',' would smuggle more
// options in. Each must be a single name or name=value from a plain
// charset, and not one that changes the operation itself.
func checkMountFlags(flags []string) error {
	if len(flags) > maxMountFlags {
		return fmt.Errorf("more than %d mount flags", maxMountFlags)
	}
	for _, f := range flags {
		if f == "" || len(f) > 256 {
			return fmt.Errorf("mount flag %.40q is empty or too long", f)
		}
		if strings.HasPrefix(f, "-") {
			return fmt.Errorf("mount flag %.40q looks like a command-line option", f)
		}
		for _, c := range f {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_.:/+=-", c)) {
				return fmt.Errorf("mount flag %.40q holds %q: each flag must be a single option (no ',', spaces or quotes)", f, c)
			}
		}
		name, _, _ := strings.Cut(f, "=")
		lower := strings.ToLower(name)
		if blockedMountOptions[lower] || strings.HasPrefix(lower, "x-") {
			return fmt.Errorf("mount flag %.40q is not allowed: it changes what mount does, not how the filesystem behaves", f)
		}
	}
	return nil
}

// contextKeys are the volume context keys the node reads; others (the
// external-provisioner adds storage.kubernetes.io/csiProvisionerIdentity,
// kubelet adds pod information) are none of its business.
var contextKeys = []string{config.ParamClusterID, config.ParamPool, config.ParamMounter,
	config.ParamMapOptions, config.ParamUnmapOptions, config.ParamMkfsOptions,
	config.ParamEncrypted, config.ParamEncryptionKMSID, config.ParamEncryptionAllowDiscards,
	config.ParamCreatedEmpty, config.ParamStaticVolume}

// volumeParams are the StorageClass parameters the node uses, from the
// volume context, checked against the volume ID. A statically provisioned
// volume may come without a context: the ID alone is enough then.
func volumeParams(vol volid.Volume, volCtx map[string]string) (config.Params, error) {
	in := map[string]string{}
	for _, k := range contextKeys {
		if v, ok := volCtx[k]; ok {
			in[k] = v
		}
	}
	for k, idValue := range map[string]string{config.ParamClusterID: vol.ClusterID, config.ParamPool: vol.Pool} {
		switch v, ok := in[k]; {
		case !ok || v == "":
			in[k] = idValue
		case v != idValue:
			return config.Params{}, fmt.Errorf("volume context %s %q does not match the volume ID (%q)", k, v, idValue)
		}
	}
	return config.ParseVolumeContext(in)
}
