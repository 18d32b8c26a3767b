package attach

import (
	"maps"
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
		MetaPrefix + "node-a": Record{Mode: snw}.Value("1234abcd"),
		MetaPrefix + "node-b": Record{Mode: mnro, ReadOnly: true}.String(), // before records named their image
		MetaPrefix + "node-c": "garbage",
		MetaPrefix + "node-d": "rw:SINGLE_NODE_WRITER@",
		"rbdcsi.name":         "pvc-1",
	}
	got := Records(meta, "1234abcd")
	if len(got) != 2 || got["node-a"].Mode != snw || !got["node-b"].ReadOnly {
		t.Fatalf("attachments = %+v", got)
	}
	if nodes := Nodes(meta, "1234abcd"); len(nodes) != 2 || nodes[0] != "node-a" {
		t.Fatalf("attachedNodes = %v", nodes)
	}
}

// A record written on another image (the peer site's copy, which
// rbd-mirror copied the metadata from, or a clone's parent) holds only
// there; here it attaches nothing and blocks no attachment.
func TestRecordsOfAnotherImage(t *testing.T) {
	onA := map[string]string{MetaPrefix + "node-of-a": Record{Mode: snw}.Value("a0a0a0")}
	if got := Records(onA, "a0a0a0"); len(got) != 1 {
		t.Fatalf("on the image it was written on: %v", got)
	}
	onB := maps.Clone(onA) // the mirror copy's metadata, as rbd-mirror copies it
	if got := Records(onB, "b1b1b1"); len(got) != 0 {
		t.Fatalf("the peer's record counts on the copy: %v", got)
	}
	if nodes := Nodes(onB, "b1b1b1"); len(nodes) != 0 {
		t.Fatalf("the copy is attached to %v", nodes)
	}
	if why := Conflict("node-of-b", Record{Mode: snw}, false, Records(onB, "b1b1b1")); why != "" {
		t.Fatalf("the peer's record blocks an attachment on the copy: %s", why)
	}
	// The same node name on both sites: B's own record replaces A's.
	onB[MetaPrefix+"node-of-a"] = Record{Mode: snw}.Value("b1b1b1")
	if got := Records(onB, "b1b1b1"); len(got) != 1 {
		t.Fatalf("B's own record: %v", got)
	}
}

func TestRecordValue(t *testing.T) {
	r := Record{Mode: mnro, ReadOnly: true}
	if got := r.Value("10ab"); got != "ro:MULTI_NODE_READER_ONLY@10ab" {
		t.Fatalf("Value = %q", got)
	}
	if got := r.Value(""); got != r.String() {
		t.Fatalf("Value without an image ID = %q", got)
	}
	for _, v := range []string{r.Value("10ab"), r.String()} {
		back, _, ok := parse(v)
		if !ok || back != r {
			t.Fatalf("parse(%q) = %v, %v", v, back, ok)
		}
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
