package records

import (
	"encoding/json"
	"strconv"

	"github.com/rbdcsi/rbdcsi/internal/attach"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/kms"
)

// Image metadata keys the controller keeps on each volume's image, all
// under MetaPrefix (the encryption record's keys are kms.Meta*).
const (
	MetaPrefix = "rbdcsi."
	// MetaName holds the CreateVolume request name. Its presence marks the
	// image as finished: an image without it is the remains of a crash.
	MetaName = "rbdcsi.name"
	// metaSource holds the snapshot or volume ID a volume was made from.
	metaSource = "rbdcsi.source"
	// metaDepth counts the clone ancestors of an image (absent: 0).
	metaDepth = "rbdcsi.depth"
	// The Kubernetes objects the volume was made for, so that an admin
	// reading `rbd image-meta list` can tell which PVC owns an image.
	metaPVCName      = "rbdcsi.k8s.pvc.name"
	metaPVCNamespace = "rbdcsi.k8s.pvc.namespace"
	metaPVName       = "rbdcsi.k8s.pv.name"
	// metaQoS holds the volume's QoS policy (config.QoS), from which the
	// limits under QoSLimitPrefix are computed.
	metaQoS = "rbdcsi.qos"
	// MetaSnapPrefix + RBD snapshot name: the VolumeSnapshot (JSON of
	// config.SnapshotOwner) that snapshot of the image was taken for.
	MetaSnapPrefix = "rbdcsi.k8s.snap."
	// metaNamePrefix holds the StorageClass's volumeNamePrefix of an
	// image not named with VolumePrefix.
	metaNamePrefix = "rbdcsi.nameprefix"
	// MetaGroupSnap holds, on a group snapshot's member image, the group
	// snapshot's ID; written last, it marks the member image finished.
	MetaGroupSnap = "rbdcsi.groupsnapshot"
	// metaSparsified holds the last sparsify request done on the volume.
	metaSparsified = "rbdcsi.sparsified"
)

// QoSLimitPrefix is what every QoS limit key starts with (librbd's
// per-image config overrides): a clone drops the limits it inherits from
// its parent unless its own policy sets them.
const QoSLimitPrefix = "conf_rbd_qos_"

// State is what an image is to this instance.
type State int

const (
	// Other: not named like this instance's volumes (a static volume's
	// image, or anyone else's).
	Other State = iota
	// Unfinished: named like a volume, without its own request name: the
	// remains of a crash, never handed out.
	Unfinished
	// Finished: a volume handed out.
	Finished
	// Hidden: a deleted volume's image, kept for its snapshots or clones.
	Hidden
)

// Volume is what an image's metadata says about it.
type Volume struct {
	Image string
	State State
	// Name is the CreateVolume request name as stored ("" if none). A
	// clone inherits its parent's until it gets its own, so only a
	// Finished volume's is its own.
	Name string
	// NamePrefix is the prefix the image was named with (VolumePrefix
	// when the metadata records none).
	NamePrefix string
	// Source is the snapshot or volume ID the volume was made from.
	Source string
	// Depth counts the image's clone ancestors.
	Depth int
	// QoS is the volume's QoS policy as stored (QoSPolicy decodes it).
	QoS string
	// Owner names the Kubernetes objects the volume was made for.
	Owner config.Owner
	// Sparsified is the last sparsify request done on the volume.
	Sparsified string
	// GroupSnapshot is, on a group snapshot's member image, its ID.
	GroupSnapshot string

	meta map[string]string
}

// Volume reads an image's metadata.
func (n Names) Volume(image string, meta map[string]string) Volume {
	v := Volume{
		Image: image, Name: meta[MetaName], NamePrefix: VolumePrefix, Source: meta[metaSource],
		QoS: meta[metaQoS], Sparsified: meta[metaSparsified], GroupSnapshot: meta[MetaGroupSnap],
		Owner: config.Owner{PVCName: meta[metaPVCName], PVCNamespace: meta[metaPVCNamespace], PVName: meta[metaPVName]},
		meta:  meta,
	}
	if p := meta[metaNamePrefix]; p != "" {
		v.NamePrefix = p
	}
	v.Depth, _ = strconv.Atoi(meta[metaDepth])
	switch _, hidden := n.HiddenID(image); {
	case hidden:
		v.State = Hidden
	case !n.IsVolumeImage(image):
		v.State = Other
	case v.Name != "" && n.Image(v.NamePrefix, v.Name) == image:
		// A name that does not hash to this image's name is one a clone
		// inherited: the image is the unfinished remains of a crash.
		v.State = Finished
	default:
		v.State = Unfinished
	}
	return v
}

// Finished tells a volume handed out from anything else.
func (v Volume) Finished() bool { return v.State == Finished }

// OriginalImage is the image name the volume was created under, also
// once it is hidden; "" without a request name.
func (n Names) OriginalImage(v Volume) string {
	if v.Name == "" {
		return ""
	}
	return n.Image(v.NamePrefix, v.Name)
}

// QoSPolicy decodes the volume's QoS policy (empty: none).
func (v Volume) QoSPolicy() (config.QoS, error) { return config.DecodeQoS(v.QoS) }

// Key reads the volume's encryption key record (kms.ReadVolumeKey).
func (v Volume) Key() (kms.VolumeKey, bool, error) { return kms.ReadVolumeKey(v.meta) }

// Encrypted reports whether the image holds a key record, whole or not: a
// part of one is still an encrypted volume's.
func (v Volume) Encrypted() bool {
	_, encrypted, _ := v.Key()
	return encrypted
}

// SnapshotOwner is the stored owner record of one of the image's
// snapshots, and whether there is one.
func (v Volume) SnapshotOwner(snap string) (string, bool) {
	o, ok := v.meta[MetaSnapPrefix+snap]
	return o, ok
}

// NewVolume is what CreateVolume writes on a new image.
type NewVolume struct {
	Name string
	// NamePrefix is the StorageClass's volumeNamePrefix ("": VolumePrefix).
	NamePrefix string
	QoS        config.QoS
	Size       uint64
	Owner      config.Owner
	// Source and Depth: for a clone or restore only.
	Source string
	Depth  int
	// Key is the encryption key record's metadata (kms.VolumeKey), if any.
	Key map[string]string
}

// NewVolumeOf is the record of a new volume of these StorageClass
// parameters and size (a clone adds its source, depth and key record).
func NewVolumeOf(name string, p config.Params, size uint64) NewVolume {
	return NewVolume{Name: name, NamePrefix: p.VolumeNamePrefix, QoS: p.QoS, Size: size, Owner: p.Owner}
}

// Metadata is the new volume's image metadata: the request name (the
// marker of a finished image, VolumeMarker: the contract writes it last),
// its QoS, the owner's names where the provisioner gave them, its source
// and its key record.
func (v NewVolume) Metadata() map[string]string {
	meta := map[string]string{MetaName: v.Name}
	if v.NamePrefix != "" && v.NamePrefix != VolumePrefix {
		meta[metaNamePrefix] = v.NamePrefix
	}
	for k, val := range QoSMetadata(v.QoS, v.Size) {
		meta[k] = val
	}
	for k, val := range map[string]string{metaPVCName: v.Owner.PVCName, metaPVCNamespace: v.Owner.PVCNamespace, metaPVName: v.Owner.PVName} {
		if val != "" {
			meta[k] = val
		}
	}
	if v.Source != "" {
		meta[metaSource] = v.Source
		meta[metaDepth] = strconv.Itoa(v.Depth)
	}
	for k, val := range v.Key {
		meta[k] = val
	}
	return meta
}

// VolumeMarker is the key a volume image is finished with.
const VolumeMarker = MetaName

// CloneDrops are the metadata prefixes a clone or restore does not
// inherit from its parent: the parent's own records (its name, key
// record, attachments, snapshot owners) and QoS limits. Its own take
// their place.
func CloneDrops() []string { return []string{MetaPrefix, QoSLimitPrefix} }

// QoSMetadata is what a policy writes on a volume of size bytes: the
// limits and the policy itself. An empty policy writes nothing.
func QoSMetadata(q config.QoS, size uint64) map[string]string {
	if len(q) == 0 {
		return nil
	}
	meta := q.Limits(size)
	meta[metaQoS] = q.String()
	return meta
}

// DepthMetadata records an image's clone depth (0 once it is flattened).
func DepthMetadata(depth int) map[string]string {
	return map[string]string{metaDepth: strconv.Itoa(depth)}
}

// SparsifiedMetadata records the sparsify request done on a volume.
func SparsifiedMetadata(request string) map[string]string {
	return map[string]string{metaSparsified: request}
}

// SnapshotOwnerKey is the metadata key of a snapshot's owner record.
func SnapshotOwnerKey(snap string) string { return MetaSnapPrefix + snap }

// SnapshotOwnerValue is the stored form of a snapshot's owner.
func SnapshotOwnerValue(owner config.SnapshotOwner) (string, error) {
	value, err := json.Marshal(owner)
	return string(value), err
}

// GroupMemberMetadata is what a group snapshot's member image is made
// with: its depth, and the group snapshot's ID as its marker
// (GroupMemberMarker).
func GroupMemberMetadata(depth int, groupID string) map[string]string {
	return map[string]string{metaDepth: strconv.Itoa(depth), MetaGroupSnap: groupID}
}

// GroupMemberMarker is the key a group snapshot's member image is
// finished with.
const GroupMemberMarker = MetaGroupSnap

// GroupMemberDrops are the metadata prefixes a group snapshot's member
// image does not inherit from its volume: it keeps the volume's name
// (whose snapshot it is) and key record (to restore an encrypted volume),
// not its attachments, snapshot owners or QoS limits.
func GroupMemberDrops() []string { return []string{attach.MetaPrefix, MetaSnapPrefix, QoSLimitPrefix} }
