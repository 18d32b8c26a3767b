package attach

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
	rw := func(m csi.VolumeCapability_AccessMode_Mode) Record { return Record{Mode: m} }
	ro := func(m csi.VolumeCapability_AccessMode_Mode) Record { return Record{Mode: m, ReadOnly: true} }
	for _, tc := range []struct {
		name     string
		want     Record
		block    bool
		existing map[string]Record
		conflict bool
	}{
		{"first attachment", rw(snw), false, nil, false},
		{"same node again", rw(snw), false, map[string]Record{"a": rw(snw)}, false},
		{"rwo elsewhere", rw(snw), false, map[string]Record{"b": rw(snw)}, true},
		{"rwop-like multi writer on one node elsewhere", rw(snmw), true, map[string]Record{"b": rw(snmw)}, true},
		{"rox next to rwo", ro(mnro), false, map[string]Record{"b": rw(snw)}, true},
		{"rox next to rox", ro(mnro), false, map[string]Record{"b": ro(mnro), "c": ro(mnro)}, false},
		{"rw publish while ro elsewhere", rw(mnmw), true, map[string]Record{"b": ro(mnro)}, true},
		{"rwx block next to rwx block", rw(mnmw), true, map[string]Record{"b": rw(mnmw)}, false},
		{"multi single writer block next to reader", ro(mnsw), true, map[string]Record{"b": rw(mnsw)}, false},
		{"second single writer", rw(mnsw), true, map[string]Record{"b": rw(mnsw)}, true},
		{"rwx filesystem never", rw(mnmw), false, map[string]Record{"b": rw(mnmw)}, true},
	} {
		if got := Conflict("a", tc.want, tc.block, tc.existing) != ""; got != tc.conflict {
			t.Errorf("%s: conflict = %v, want %v", tc.name, got, tc.conflict)
		}
	}
}

func TestAttachmentRecords(t *testing.T) {
	meta := map[string]string{
		MetaPrefix + "node-a": Record{Mode: snw}.String(),
		MetaPrefix + "node-b": Record{Mode: mnro, ReadOnly: true}.String(),
		MetaPrefix + "node-c": "garbage",
		"rbdcsi.name":         "pvc-1",
	}
	got := Records(meta)
	if len(got) != 2 || got["node-a"].Mode != snw || !got["node-b"].ReadOnly {
		t.Fatalf("attachments = %+v", got)
	}
	if nodes := Nodes(meta); len(nodes) != 2 || nodes[0] != "node-a" {
		t.Fatalf("attachedNodes = %v", nodes)
	}
}

func TestFencedAtDetach(t *testing.T) {
	for _, c := range []struct {
		r    Record
		want bool
	}{
		{Record{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}, true},
		{Record{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER}, true},
		{Record{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER}, true},
		{Record{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, ReadOnly: true}, false},
		{Record{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, ReadOnly: true}, false},
		{Record{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER}, false},
		{Record{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER}, false},
		{Record{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, ReadOnly: true}, false},
	} {
		if got := FencedAtDetach(c.r); got != c.want {
			t.Errorf("FencedAtDetach(%s) = %v", c.r, got)
		}
	}
}
