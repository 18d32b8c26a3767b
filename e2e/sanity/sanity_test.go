// Package sanity runs the CSI conformance suite (csi-test's sanity package)
// against the real plugin binary, through its real socket, on the real
// local Ceph cluster.
package sanity

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
)

// skipped lists the sanity specs we do not run, each with the reason. Only
// a capability the driver does not advertise may justify a skip (docs/development.md#csi-sanity).
var skipped = map[string]string{}

func TestSanity(t *testing.T) {
	c := harness.LoadCluster(t)
	secretDir := harness.WriteControllerSecretDir(t, c)
	// The node keeps rbd-fuse mounts in its state dir; removing that with
	// RemoveAll while one is live would delete the image through it, so
	// it is removed only once nothing is mounted below it.
	stateDir, err := os.MkdirTemp("", "rbdcsi-sanity-node-")
	harness.Must(t, err, "state dir")
	t.Cleanup(func() {
		if mounts, _ := os.ReadFile("/proc/self/mountinfo"); !strings.Contains(string(mounts), stateDir+"/") {
			os.RemoveAll(stateDir)
		} else {
			t.Errorf("mounts left under %s", stateDir)
		}
	})
	// The fuse mounter: this machine has neither krbd nor nbd (MACHINE.md).
	// The node reports a zone (topology.rbd.csi.rbdcsi.dev/zone=zone-a), so
	// the plugin advertises topology and the suite's topology specs run:
	// their volumes go to the class's pool for that zone, the others to
	// its plain pool.
	p := harness.StartPlugin(t, c, "--mode", "all", "--nodeid", "sanity-node", "--default-mounter", "fuse",
		"--state-dir", stateDir, "--controller-secret-dir", secretDir,
		"--node-registry", c.ClusterID+"/"+c.Pool, "--node-secret-dir", secretDir, "--v", "10",
		"--max-volumes-per-node", "4",
		"--domain-labels", "topology.kubernetes.io/zone", "--node-labels", "topology.kubernetes.io/zone=zone-a,kubernetes.io/hostname=sanity-node")

	work := t.TempDir()
	secretsFile := filepath.Join(work, "secrets.yaml")
	var sb strings.Builder
	for _, kind := range []string{"CreateVolumeSecret", "DeleteVolumeSecret", "ControllerPublishVolumeSecret",
		"ControllerUnpublishVolumeSecret", "ControllerValidateVolumeCapabilitiesSecret", "NodeStageVolumeSecret",
		"NodePublishVolumeSecret", "CreateSnapshotSecret", "DeleteSnapshotSecret", "ControllerExpandVolumeSecret", "ControllerModifyVolumeSecret",
		"ListSnapshotsSecret", "GetSnapshotSecret"} {
		fmt.Fprintf(&sb, "%s:\n  userID: %q\n  userKey: %q\n", kind, c.CSIUser, c.CSIKey)
	}
	harness.Must(t, os.WriteFile(secretsFile, []byte(sb.String()), 0o600), "secrets file")

	cfg := sanity.NewTestConfig()
	cfg.Address = p.Socket
	cfg.TargetPath = filepath.Join(work, "target")
	cfg.StagingPath = filepath.Join(work, "staging")
	cfg.SecretsFile = secretsFile
	cfg.TestVolumeParameters = c.Params("topologyConstrainedPools",
		`[{"poolName":"`+c.Pool+`","domainSegments":[{"domainLabel":"zone","value":"zone-a"}]}]`)
	cfg.TestVolumeSize = 1 << 30 // thin: costs nothing until written
	cfg.TestVolumeExpandSize = 2 << 30
	// A VolumeAttributesClass's parameters: QoS, the only mutable ones.
	cfg.TestVolumeMutableParameters = map[string]string{"maxIops": "1000", "baseBps": "104857600", "bpsPerGiB": "1048576"}
	cfg.IdempotentCount = 3
	cfg.TestNodeVolumeAttachLimit = true // the controller enforces the node's limit
	sanity.GinkgoTest(&cfg)

	RegisterFailHandler(Fail)
	suite, reporter := GinkgoConfiguration()
	for focus := range skipped {
		suite.SkipStrings = append(suite.SkipStrings, focus)
	}
	// The whole suite runs at the highest verbosity, and the CSI user's key
	// must show up nowhere: not in the log, not in any process's command
	// line or environment, not in a file the plugin leaves behind.
	stopWatch := harness.WatchSecret(c.CSIKey, p)
	RunSpecs(t, "CSI sanity on real Ceph", suite, reporter)
	if seen := stopWatch(); len(seen) > 0 {
		t.Errorf("the key was visible in /proc: %v", seen)
	}
	if strings.Contains(p.Logs(), c.CSIKey) {
		t.Error("the key is in the plugin log")
	}
	if files := harness.FilesContaining(stateDir, c.CSIKey); len(files) > 0 {
		t.Errorf("the key is in files the plugin left: %v", files)
	}

	c.ExpectNoImages(t)
}
