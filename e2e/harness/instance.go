package harness

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// A suite runs as one driver instance: $RBDCSI_INSTANCE_ID, passed to every
// plugin it starts as --instance-id ("" the default). What the suite makes
// and inspects in the pool is scoped to its instance, so that two suites
// of different instances can run on one pool at once, as two Kubernetes
// clusters sharing it would (scripts/instances.sh).

const instanceEnv = "RBDCSI_INSTANCE_ID"

// Name scopes a name the test gives to a raw image, Ceph user or RADOS
// namespace to the suite's instance, so that a concurrent suite's test of
// the same name does not touch it; images so named count as the suite's.
func (c Cluster) Name(base string) string {
	if c.Instance == "" {
		return base
	}
	return base + "." + c.Instance
}

// Object is the suite's instance's copy of a per-pool index object of the
// driver (rbdcsi.nodes, rbdcsi.snapclaims, rbdcsi.statictmp).
func (c Cluster) Object(base string) string { return c.Name(base) }

// VolumeImage is the image the driver names for a CreateVolume request name
// (default prefix); SnapName the RBD snapshot for a CreateSnapshot name.
// They restate the driver's naming so that a test can reach what a crash
// left before any ID was returned.
func (c Cluster) VolumeImage(requestName string) string {
	return "csi-vol-" + c.nameHash(requestName, 10) + c.suffix()
}

// SnapName: see VolumeImage.
func (c Cluster) SnapName(requestName string) string { return "csi-snap-" + c.nameHash(requestName, 8) }

func (c Cluster) nameHash(s string, n int) string {
	if c.Instance != "" {
		s = c.Instance + "/" + s
	}
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:n])
}

func (c Cluster) suffix() string {
	if c.Instance == "" {
		return ""
	}
	return "." + c.Instance
}

// ownsImage: the suite's instance's image (all of them for the default
// instance, which runs alone).
func (c Cluster) ownsImage(name string) bool {
	return c.Instance == "" || strings.HasSuffix(name, c.suffix())
}

// InstanceImages lists the images named by the cluster's instance only,
// for a test that runs several instances itself: for the default
// instance, those without an instance suffix.
func (c Cluster) InstanceImages(t testing.TB) []string {
	t.Helper()
	return c.imagesWhere(t, func(img string) bool {
		return c.Instance == "" && !strings.Contains(img, ".") || c.Instance != "" && strings.HasSuffix(img, c.suffix())
	})
}

// NeedsWholeCluster skips a test that stops the monitor, fills the pool or
// otherwise disturbs every user of the cluster, when another instance's
// suite may share it. The suite runs it when it runs alone (`make
// integration`).
func (c Cluster) NeedsWholeCluster(t testing.TB) {
	t.Helper()
	if c.Instance != "" {
		t.Skipf("disturbs every user of the cluster; runs when the suite runs alone, not beside another instance's (%s=%s)", instanceEnv, c.Instance)
	}
}

func instanceFromEnv() string { return os.Getenv(instanceEnv) }
