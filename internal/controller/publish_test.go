package controller

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

const (
	snw  = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	snmw = csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER
	mnro = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
	mnmw = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	mnsw = csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER
)

func TestConflict(t *testing.T) {
	rw := func(m csi.VolumeCapability_AccessMode_Mode) attachment { return attachment{mode: m} }
	ro := func(m csi.VolumeCapability_AccessMode_Mode) attachment { return attachment{mode: m, readOnly: true} }
	for _, tc := range []struct {
		name     string
		want     attachment
		block    bool
		existing map[string]attachment
		conflict bool
	}{
		{"first attachment", rw(snw), false, nil, false},
		{"same node again", rw(snw), false, map[string]attachment{"a": rw(snw)}, false},
		{"rwo elsewhere", rw(snw), false, map[string]attachment{"b": rw(snw)}, true},
		{"rwop-like multi writer on one node elsewhere", rw(snmw), true, map[string]attachment{"b": rw(snmw)}, true},
		{"rox next to rwo", ro(mnro), false, map[string]attachment{"b": rw(snw)}, true},
		{"rox next to rox", ro(mnro), false, map[string]attachment{"b": ro(mnro), "c": ro(mnro)}, false},
		{"rw publish while ro elsewhere", rw(mnmw), true, map[string]attachment{"b": ro(mnro)}, true},
		{"rwx block next to rwx block", rw(mnmw), true, map[string]attachment{"b": rw(mnmw)}, false},
		{"multi single writer block next to reader", ro(mnsw), true, map[string]attachment{"b": rw(mnsw)}, false},
		{"second single writer", rw(mnsw), true, map[string]attachment{"b": rw(mnsw)}, true},
		{"rwx filesystem never", rw(mnmw), false, map[string]attachment{"b": rw(mnmw)}, true},
	} {
		if got := conflict("a", tc.want, tc.block, tc.existing) != ""; got != tc.conflict {
			t.Errorf("%s: conflict = %v, want %v", tc.name, got, tc.conflict)
		}
	}
}

func TestAttachmentRecords(t *testing.T) {
	meta := map[string]string{
		metaAttachPrefix + "node-a": attachment{mode: snw}.String(),
		metaAttachPrefix + "node-b": attachment{mode: mnro, readOnly: true}.String(),
		metaAttachPrefix + "node-c": "garbage",
		metaName:                    "pvc-1",
	}
	got := attachments(meta)
	if len(got) != 2 || got["node-a"].mode != snw || !got["node-b"].readOnly {
		t.Fatalf("attachments = %+v", got)
	}
	if nodes := attachedNodes(meta); len(nodes) != 2 || nodes[0] != "node-a" {
		t.Fatalf("attachedNodes = %v", nodes)
	}
}
