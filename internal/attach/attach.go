// Package attach holds the attachment records the controller keeps in each
// image's metadata (which node has a volume, how), and the rules for which
// attachments may coexist. The controller writes them; the node reads them
// to refuse mapping a volume that is not attached to it.
package attach

import (
	"fmt"
	"sort"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// MetaPrefix + node ID records an attachment in the image metadata:
// Ceph itself knows where each volume is attached.
//
// A record names the RBD image ID it was written on (Value): it holds
// only on that image. Image metadata travels where the image's data goes:
// rbd-mirror copies it to the peer site's copy (another image ID, in
// another cluster), and librbd copies it into clones. A record that came
// that way names another image: the node it names is a node of the other
// site (or of the parent), which has nothing attached here, and it must
// not keep this site from attaching the promoted copy, nor from deleting
// it. The image ID is what tells them apart: the mirror global ID is the
// same on every site and the cluster is not in the metadata, while the
// image ID is this copy's own, drawn by this cluster. Records written
// before the image ID was part of them (no "@") count as this image's,
// as they did.
const MetaPrefix = "rbdcsi.attach/"

// PublishContextNode is the publish_context key naming the node the volume
// was attached to; NodeStageVolume checks the attachment in Ceph anyway.
const PublishContextNode = "rbdcsi.dev/attached-node"

// Record is one node's attachment: its access mode and whether it writes.
type Record struct {
	Mode     csi.VolumeCapability_AccessMode_Mode
	ReadOnly bool
}

func (a Record) String() string {
	rw := "rw"
	if a.ReadOnly {
		rw = "ro"
	}
	return rw + ":" + a.Mode.String()
}

// Value is the record as stored on the image with RBD ID imageID.
func (a Record) Value(imageID string) string {
	if imageID == "" {
		return a.String()
	}
	return a.String() + "@" + imageID
}

// parse reads a record's value, and the image ID it names ("" for one
// written before records named it).
func parse(s string) (Record, string, bool) {
	s, imageID, tagged := strings.Cut(s, "@")
	if tagged && imageID == "" {
		return Record{}, "", false
	}
	rw, mode, ok := strings.Cut(s, ":")
	m, known := csi.VolumeCapability_AccessMode_Mode_value[mode]
	if !ok || !known || (rw != "rw" && rw != "ro") {
		return Record{}, "", false
	}
	return Record{Mode: csi.VolumeCapability_AccessMode_Mode(m), ReadOnly: rw == "ro"}, imageID, true
}

// Records reads the attachment records of the image with RBD ID imageID
// from its metadata, leaving out those written on another image (MetaPrefix).
func Records(meta map[string]string, imageID string) map[string]Record {
	out := map[string]Record{}
	for k, v := range meta {
		if node, ok := strings.CutPrefix(k, MetaPrefix); ok {
			if a, on, ok := parse(v); ok && (on == "" || on == imageID) {
				out[node] = a
			}
		}
	}
	return out
}

// Nodes lists the nodes the image with RBD ID imageID is attached to,
// sorted.
func Nodes(meta map[string]string, imageID string) []string {
	var nodes []string
	for n := range Records(meta, imageID) {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	return nodes
}

// SingleNode reports whether an access mode allows one node only.
func SingleNode(m csi.VolumeCapability_AccessMode_Mode) bool {
	switch m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return true
	}
	return false
}

// FencedAtDetach reports whether detaching an attachment of this kind
// blocklists the clients that still have the image open: a single-node
// writer is the volume's only writer, so a client left after its detach
// is a stale mapping on a node that was cut off, whose late writes would
// land under the next node's filesystem. Readers write nothing. Nodes of
// a multi-node mode share the image by design and coordinate through the
// application; fencing one of them is out of scope.
func FencedAtDetach(r Record) bool { return SingleNode(r.Mode) && !r.ReadOnly }

// Conflict says why a new attachment cannot join the existing ones, or "".
// Single-node modes exclude every other node; a writer excludes every other
// node unless all are raw block multi-writers (the application then owns
// the coordination, as with a clustered filesystem).
func Conflict(node string, want Record, block bool, existing map[string]Record) string {
	for other, a := range existing {
		if other == node {
			continue
		}
		switch {
		case SingleNode(want.Mode) || SingleNode(a.Mode):
			return fmt.Sprintf("it is attached to node %s, and access mode %s allows one node only", other, pick(SingleNode(want.Mode), want.Mode, a.Mode))
		case !want.ReadOnly && a.ReadOnly:
			return fmt.Sprintf("node %s has it attached read-only; a read-write attachment elsewhere would change data under it", other)
		case !want.ReadOnly && !a.ReadOnly && (want.Mode == csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER || a.Mode == csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER):
			return fmt.Sprintf("node %s writes to it already and access mode %s allows one writer", other, csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER)
		case !want.ReadOnly || !a.ReadOnly:
			if !block {
				return fmt.Sprintf("node %s has it attached and a filesystem cannot be written from several nodes", other)
			}
		}
	}
	return ""
}

func pick[T any](first bool, a, b T) T {
	if first {
		return a
	}
	return b
}
