// Package config parses and checks what arrives with each request: the
// StorageClass and VolumeAttributesClass parameters, a volume's context,
// and the options they pass on to the node's tools. The cluster map and
// the credentials are internal/cluster's.
package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// StorageClass parameter names the driver accepts.
const (
	ParamClusterID     = "clusterID"
	ParamPool          = "pool"
	ParamDataPool      = "dataPool"
	ParamImageFeatures = "imageFeatures"
	ParamFsType        = "csi.storage.k8s.io/fstype"
	ParamMounter       = "mounter"
	ParamMapOptions    = "mapOptions"
	ParamUnmapOptions  = "unmapOptions"
	ParamMkfsOptions   = "mkfsOptions"
	// ParamStaticVolume "true" in a PV's volumeAttributes marks an image
	// this driver did not create (rbd create, ceph-csi, the in-tree plugin)
	// that an admin hands to it. Never a StorageClass parameter.
	ParamStaticVolume = "staticVolume"
	// ParamCreatedEmpty "true" in a volume context says CreateVolume made
	// the image empty (no snapshot or volume to copy): no block of it was
	// ever written, so the node may format it taking every block for
	// zeros. Set by the controller only, never a StorageClass parameter.
	ParamCreatedEmpty = "createdEmpty"
	// ParamVolumeNamePrefix replaces csi-vol- in the names of the
	// StorageClass's images, so `rbd ls` shows whose they are.
	ParamVolumeNamePrefix = "volumeNamePrefix"
)

// ReservedPrefix marks keys the Kubernetes sidecars add or consume
// (secret references, PVC/PV names with --extra-create-metadata).
const ReservedPrefix = "csi.storage.k8s.io/"

// Mounters are what a volume can be mapped with on a node (internal/mapper
// names them alike).
func Mounters() []string { return []string{"krbd", "nbd", "fuse"} }

// FsTypes are the filesystems the node can format and mount.
func FsTypes() []string { return []string{"ext4", "xfs"} }

// DefaultFsType is the filesystem of a volume whose capability names none.
const DefaultFsType = "ext4"

// Params are the validated StorageClass parameters of a volume.
type Params struct {
	ClusterID     string
	Pool          string
	DataPool      string
	ImageFeatures []string // the StorageClass's; nil if it names none (see VolumeFeatures)
	FsType        string
	Mounter       string
	MapOptions    string
	UnmapOptions  string
	MkfsOptions   []string
	Owner         Owner // who asked for the volume, where the provisioner says
	Static        bool  // a volume context's staticVolume
	CreatedEmpty  bool  // a volume context's createdEmpty
	QoS           QoS   // the StorageClass's QoS parameters (qos.go)
	// VolumeNamePrefix names new images instead of csi-vol- ("": that).
	VolumeNamePrefix string
	// TopologyPools, when set, place a volume by its topology (topology.go);
	// Pool is then the pool for requests that carry no topology, if any.
	TopologyPools []TopologyPool
	// Encryption of the volume (encryption.go).
	Encryption Encryption
}

// Owner names the Kubernetes objects a volume was made for, from the
// keys external-provisioner adds with --extra-create-metadata. Any of them
// may be empty (a provisioner without the flag, csi-sanity).
type Owner struct {
	PVCName, PVCNamespace, PVName string
}

// The keys external-provisioner adds with --extra-create-metadata.
const (
	ParamPVCName      = ReservedPrefix + "pvc/name"
	ParamPVCNamespace = ReservedPrefix + "pvc/namespace"
	ParamPVName       = ReservedPrefix + "pv/name"
)

// The keys external-snapshotter adds to CreateSnapshot with
// --extra-create-metadata.
const (
	ParamSnapshotName        = ReservedPrefix + "volumesnapshot/name"
	ParamSnapshotNamespace   = ReservedPrefix + "volumesnapshot/namespace"
	ParamSnapshotContentName = ReservedPrefix + "volumesnapshotcontent/name"
)

// SnapshotOwner names the Kubernetes objects a snapshot was taken for.
type SnapshotOwner struct {
	Name      string `json:"volumeSnapshot"`
	Namespace string `json:"namespace"`
	Content   string `json:"volumeSnapshotContent"`
}

// ParseSnapshotOwner reads the snapshotter's keys from CreateSnapshot
// parameters; all empty without --extra-create-metadata.
func ParseSnapshotOwner(in map[string]string) (SnapshotOwner, error) {
	for _, k := range []string{ParamSnapshotName, ParamSnapshotNamespace, ParamSnapshotContentName} {
		if len(in[k]) > maxOwnerNameLen {
			return SnapshotOwner{}, fmt.Errorf("parameter %s is longer than %d bytes", k, maxOwnerNameLen)
		}
	}
	return SnapshotOwner{Name: in[ParamSnapshotName], Namespace: in[ParamSnapshotNamespace], Content: in[ParamSnapshotContentName]}, nil
}

// maxOwnerNameLen bounds each owner name: Kubernetes names are at most 253
// bytes, and anything longer is not the provisioner's.
const maxOwnerNameLen = 253

// ParseParams validates a CreateVolume parameter map. Unknown keys are
// refused so a typo in a StorageClass is caught at the first PVC, not
// silently ignored.
func ParseParams(in map[string]string) (Params, error) {
	p, err := parse(in)
	if err != nil {
		return Params{}, err
	}
	if p.Static {
		return Params{}, fmt.Errorf("%s is a PersistentVolume's volumeAttribute for an existing image, not a StorageClass parameter", ParamStaticVolume)
	}
	if _, ok := in[ParamCreatedEmpty]; ok {
		return Params{}, fmt.Errorf("%s is set by the driver in a volume's context, not a StorageClass parameter", ParamCreatedEmpty)
	}
	if len(p.MkfsOptions) > 0 {
		fs := p.FsType
		if fs == "" {
			fs = DefaultFsType
		}
		if err := CheckMkfsOptions(fs, p.MkfsOptions); err != nil {
			return Params{}, fmt.Errorf("%w (checked for the StorageClass's %s, %s when unset)", err, ParamFsType, DefaultFsType)
		}
	}
	if p.ImageFeatures != nil {
		if err := checkOptionFeatures(p.MapOptions, p.ImageFeatures); err != nil {
			return Params{}, err
		}
	}
	return p, nil
}

// ParseVolumeContext validates the parameters a node finds in a volume
// context. That carries no imageFeatures: whether the map options suit the
// image's features was checked when the volume was created.
func ParseVolumeContext(in map[string]string) (Params, error) { return parse(in) }

func parse(in map[string]string) (Params, error) {
	p := Params{
		ClusterID: in[ParamClusterID],
		Pool:      in[ParamPool],
		DataPool:  in[ParamDataPool],
		FsType:    in[ParamFsType],
		Mounter:   in[ParamMounter],
	}
	for _, k := range sortedKeys(in) {
		switch k {
		case ParamClusterID, ParamPool, ParamDataPool, ParamImageFeatures, ParamFsType,
			ParamMounter, ParamMapOptions, ParamUnmapOptions, ParamMkfsOptions, ParamStaticVolume, ParamCreatedEmpty, ParamVolumeNamePrefix,
			ParamTopologyConstrainedPools, ParamEncrypted, ParamEncryptionKMSID, ParamEncryptionAllowDiscards:
		default:
			if !strings.HasPrefix(k, ReservedPrefix) && !IsQoSParam(k) {
				return Params{}, fmt.Errorf("unknown parameter %.60q (known: %s)", k, strings.Join(knownParams(), ", "))
			}
		}
	}
	var err error
	if p.Static, err = parseBool(in, ParamStaticVolume); err != nil {
		return Params{}, err
	}
	if p.CreatedEmpty, err = parseBool(in, ParamCreatedEmpty); err != nil {
		return Params{}, err
	}
	if p.Encryption, err = parseEncryption(in); err != nil {
		return Params{}, err
	}
	if p.ClusterID == "" {
		return Params{}, fmt.Errorf("parameter %q is required", ParamClusterID)
	}
	if err := volid.ValidClusterID(p.ClusterID); err != nil {
		return Params{}, fmt.Errorf("parameter %s: %w", ParamClusterID, err)
	}
	if p.TopologyPools, err = parseTopologyPools(in[ParamTopologyConstrainedPools]); err != nil {
		return Params{}, err
	}
	if p.Pool == "" && p.TopologyPools == nil {
		return Params{}, fmt.Errorf("parameter %q is required (or %s)", ParamPool, ParamTopologyConstrainedPools)
	}
	if p.Pool != "" {
		if err := volid.ValidPool(p.Pool); err != nil {
			return Params{}, fmt.Errorf("parameter %s: %w", ParamPool, err)
		}
	}
	if p.DataPool != "" {
		if err := volid.ValidPool(p.DataPool); err != nil {
			return Params{}, fmt.Errorf("parameter %s: %w", ParamDataPool, err)
		}
	}
	if p.FsType != "" && !contains(FsTypes(), p.FsType) {
		return Params{}, fmt.Errorf("parameter %s: filesystem %.30q is not supported (choose one of %s)", ParamFsType, p.FsType, strings.Join(FsTypes(), ", "))
	}
	if p.Mounter != "" && !contains(Mounters(), p.Mounter) {
		return Params{}, fmt.Errorf("parameter %s: %.30q is not a mounter (choose one of %s)", ParamMounter, p.Mounter, strings.Join(Mounters(), ", "))
	}
	features, err := parseFeatures(in[ParamImageFeatures], p.Mounter)
	if err != nil {
		return Params{}, err
	}
	p.ImageFeatures = features
	for _, k := range []string{ParamMapOptions, ParamUnmapOptions} {
		if err := checkOptionsParam(k, in[k]); err != nil {
			return Params{}, err
		}
	}
	p.MapOptions, p.UnmapOptions = in[ParamMapOptions], in[ParamUnmapOptions]
	if p.MkfsOptions, err = ParseMkfsOptions(in[ParamMkfsOptions]); err != nil {
		return Params{}, err
	}
	if p.QoS, err = ParseQoS(in); err != nil {
		return Params{}, err
	}
	if p.VolumeNamePrefix = in[ParamVolumeNamePrefix]; p.VolumeNamePrefix != "" {
		if err := ValidVolumeNamePrefix(p.VolumeNamePrefix); err != nil {
			return Params{}, fmt.Errorf("parameter %s: %w", ParamVolumeNamePrefix, err)
		}
	}
	p.Owner = Owner{PVCName: in[ParamPVCName], PVCNamespace: in[ParamPVCNamespace], PVName: in[ParamPVName]}
	for _, k := range []string{ParamPVCName, ParamPVCNamespace, ParamPVName} {
		if len(in[k]) > maxOwnerNameLen {
			return Params{}, fmt.Errorf("parameter %s is longer than %d bytes", k, maxOwnerNameLen)
		}
	}
	return p, nil
}

// VolumeContext is what the node needs from the StorageClass, returned in
// CreateVolume's volume_context (the node gets it back in NodeStageVolume).
func (p Params) VolumeContext() map[string]string {
	ctx := map[string]string{ParamClusterID: p.ClusterID, ParamPool: p.Pool}
	for k, v := range map[string]string{
		ParamMounter: p.Mounter, ParamMapOptions: p.MapOptions,
		ParamUnmapOptions: p.UnmapOptions, ParamMkfsOptions: strings.Join(p.MkfsOptions, " "),
	} {
		if v != "" {
			ctx[k] = v
		}
	}
	if p.CreatedEmpty {
		ctx[ParamCreatedEmpty] = "true"
	}
	p.Encryption.context(ctx)
	return ctx
}

// ParseMkfsOptions splits the mkfsOptions parameter into arguments for
// mkfs; CheckMkfsOptions then holds them against the filesystem's
// allow-list.
func ParseMkfsOptions(s string) ([]string, error) {
	if len(s) > 512 {
		return nil, fmt.Errorf("parameter %s is longer than 512 bytes", ParamMkfsOptions)
	}
	return strings.Fields(s), nil
}

// StorageClassParams lists every StorageClass parameter the driver takes
// besides the reserved csi.storage.k8s.io/ keys (the Helm chart's schema
// names the same: deploy/helm's test compares them).
func StorageClassParams() []string {
	return append([]string{ParamClusterID, ParamPool, ParamDataPool, ParamImageFeatures, ParamMounter,
		ParamMapOptions, ParamUnmapOptions, ParamMkfsOptions, ParamVolumeNamePrefix, ParamTopologyConstrainedPools,
		ParamEncrypted, ParamEncryptionKMSID, ParamEncryptionAllowDiscards},
		QoSParams()...)
}

// MutableParams lists the parameters a VolumeAttributesClass may set
// (ControllerModifyVolume).
func MutableParams() []string { return append([]string{ParamSparsify}, QoSParams()...) }

func knownParams() []string {
	return []string{ParamClusterID, ParamPool, ParamDataPool, ParamImageFeatures, ParamFsType,
		ParamMounter, ParamMapOptions, ParamUnmapOptions, ParamMkfsOptions, ParamStaticVolume, ParamVolumeNamePrefix,
		ParamTopologyConstrainedPools, ParamEncrypted, ParamEncryptionKMSID, ParamEncryptionAllowDiscards, "the QoS parameters"}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// MaxVolumeNamePrefixLen keeps a volume ID within volid.MaxLen with the
// longest clusterID and pool: the image name is the prefix and 20 hex
// digits.
const MaxVolumeNamePrefixLen = 24

// reservedNamePrefixes name what the driver makes besides volumes.
var reservedNamePrefixes = []string{"csi-del-", "csi-snap-", "csi-tmp-", "rbdcsi."}

// ValidVolumeNamePrefix checks a volumeNamePrefix: 2 to 24 lower-case
// letters, digits, '-' and '.', starting with a letter and ending in '-',
// and not a prefix the driver uses for anything else.
func ValidVolumeNamePrefix(s string) error {
	if len(s) < 2 || len(s) > MaxVolumeNamePrefixLen || s[0] < 'a' || s[0] > 'z' || s[len(s)-1] != '-' {
		return fmt.Errorf("%.40q: want 2 to %d characters, starting with a lower-case letter and ending in '-' (like k8s-prod-)", s, MaxVolumeNamePrefixLen)
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return fmt.Errorf("%q: only lower-case letters, digits, '-' and '.' are allowed", s)
		}
	}
	for _, r := range reservedNamePrefixes {
		if strings.HasPrefix(s, r) || strings.HasPrefix(r, s) {
			return fmt.Errorf("%q overlaps %s, which the driver names other things with", s, r)
		}
	}
	return nil
}
