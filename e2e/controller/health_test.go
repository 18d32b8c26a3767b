package controller

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// wantHealth asks the plugin for the volume's health and wants exactly
// the conditions given, as "STATUS Reason".
func wantHealth(t *testing.T, e env, volumeID string, want ...string) {
	t.Helper()
	resp, err := e.cc.ControllerGetVolumeHealth(harness.Ctx(t), &csi.ControllerGetVolumeHealthRequest{VolumeId: volumeID})
	harness.Must(t, err, "ControllerGetVolumeHealth")
	var got []string
	for _, h := range resp.GetVolumeHealth().GetHealthStatuses() {
		got = append(got, h.GetStatus().String()+" "+h.GetReason())
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") || resp.GetVolumeHealth().GetVolumeId() != volumeID {
		t.Fatalf("health of %s: %v, want %q", volumeID, resp.GetVolumeHealth(), want)
	}
}

// A volume whose image was removed behind the driver is reported
// inaccessible; a healthy one has no condition.
func TestVolumeHealthOfAMissingImage(t *testing.T) {
	e := setup(t)
	v := e.mustCreate(t, "health", 4*mib)
	wantHealth(t, e, v.VolumeId)
	image := v.VolumeId[strings.LastIndex(v.VolumeId, ":")+1:]
	spec := e.c.Pool + "/"
	if e.c.Namespace != "" {
		spec += e.c.Namespace + "/"
	}
	if out, err := e.c.RBD("rm", "--no-progress", spec+image); err != nil {
		t.Fatalf("rbd rm behind the driver: %v: %s", err, out)
	}
	wantHealth(t, e, v.VolumeId, "INACCESSIBLE ImageMissing")
}

// Placement groups stuck inactive under a volume (here: the pool asks for
// more copies than the cluster has OSDs, so none can be active) are
// reported once Ceph calls them stuck, without reading the image, which
// would wait on them; the condition goes once they are active again.
func TestVolumeHealthOfInactivePlacementGroups(t *testing.T) {
	e := setup(t)
	e.c.NeedsWholeCluster(t) // the pool's placement groups stop serving
	v := e.mustCreate(t, "health-pgs", 4*mib)
	get := func(what string) string {
		out, err := e.c.Ceph("osd", "pool", "get", e.c.Pool, what)
		harness.Must(t, err, "ceph osd pool get %s: %s", what, out)
		_, val, _ := strings.Cut(strings.TrimSpace(out), ": ")
		return val
	}
	size, minSize := get("size"), get("min_size")
	osds, err := e.c.Ceph("osd", "ls")
	harness.Must(t, err, "ceph osd ls: %s", osds)
	more := strconv.Itoa(len(strings.Fields(osds)) + 1)
	set := func(what, val string) {
		e.c.CephRepair(t, "osd", "pool", "set", e.c.Pool, what, val, "--yes-i-really-mean-it")
	}
	// Ceph calls placement groups stuck after mon_pg_stuck_threshold
	// (a minute); five seconds keep the test short.
	if out, err := e.c.Ceph("config", "set", "global", "mon_pg_stuck_threshold", "5"); err != nil {
		t.Fatalf("ceph config set: %v: %s", err, out)
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		set("min_size", minSize)
		set("size", size)
		// Active again before the threshold goes: without it `ceph
		// health` would stop naming the groups long before they serve.
		e.c.WaitPoolActive(t, e.c.Pool)
		e.c.CephRepair(t, "config", "rm", "global", "mon_pg_stuck_threshold")
	}
	t.Cleanup(restore)
	set("size", more)
	set("min_size", more)

	health := func() string {
		resp, err := e.cc.ControllerGetVolumeHealth(harness.Ctx(t), &csi.ControllerGetVolumeHealthRequest{VolumeId: v.VolumeId})
		if status.Code(err) == codes.Unavailable {
			// Until Ceph calls them stuck, reading the image times out:
			// an error of the call, not a condition.
			return "unavailable"
		}
		harness.Must(t, err, "ControllerGetVolumeHealth")
		var got []string
		for _, h := range resp.GetVolumeHealth().GetHealthStatuses() {
			got = append(got, h.GetStatus().String()+" "+h.GetReason())
		}
		return strings.Join(got, "; ")
	}
	waitWithin(t, "the inactive placement groups reported", 3*time.Minute, func() bool { return health() == "INACCESSIBLE PlacementGroupsInactive" })
	restore()
	waitWithin(t, "the condition gone", 3*time.Minute, func() bool { return health() == "" })
}
