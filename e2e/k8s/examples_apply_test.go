//go:build e2e_k8s

package k8s

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// How TestExamples applies deploy/examples: each file as a user applies
// it, in a namespace of the scenario's. Their pods run the busybox image
// the e2e imports under the examples' name (scripts/k8s-build.sh).
const examplesDir = "../../deploy/examples"

// exampleObject is one document of an example file.
type exampleObject struct {
	file       string
	kind, name string
	namespaced bool
	doc        map[string]any
}

// clusterScoped are the kinds of the examples that live outside a
// namespace.
var clusterScoped = []string{"StorageClass", "VolumeAttributesClass", "PersistentVolume", "VolumeGroupSnapshotClass"}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// readExample decodes the documents of one example file.
func readExample(t *testing.T, file string) []exampleObject {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(examplesDir, file))
	if err != nil {
		t.Fatal(err)
	}
	var out []exampleObject
	for _, part := range docSeparator.Split(string(data), -1) {
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(part), &doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if doc == nil {
			continue // comments only
		}
		md, _ := doc["metadata"].(map[string]any)
		kind, _ := doc["kind"].(string)
		name, _ := md["name"].(string)
		if kind == "" || name == "" {
			t.Fatalf("%s: a document without kind or name", file)
		}
		out = append(out, exampleObject{file: file, kind: kind, name: name, namespaced: !slices.Contains(clusterScoped, kind), doc: doc})
	}
	if len(out) == 0 {
		t.Fatalf("%s: no objects", file)
	}
	return out
}

// exampleRun applies the files of one scenario in its namespace and
// removes what it applied when the scenario ends: pods, group snapshots,
// snapshots and claims first (through the driver), then, once their
// volumes are gone, the cluster-scoped objects the examples brought.
type exampleRun struct {
	t       *testing.T
	k       *kube
	cluster *kube
	pvs     []string // PVs of the scenario's claims, waited for at cleanup
	objects []exampleObject
	after   []func() // run at the end of the cleanup, once the volumes are gone
	// scenario is the run of the scenario, for a subtest's (see sub).
	scenario *exampleRun
}

func newExampleRun(t *testing.T, name string) *exampleRun {
	t.Helper()
	k := newKube(t, "ex-"+name)
	x := &exampleRun{t: t, k: k, cluster: &kube{t: t, e: k.e}}
	t.Cleanup(x.cleanup) // before newKube's, which deletes the namespace
	return x
}

// sub is x for a subtest of the scenario: the same namespace, with
// failures reported on t; what it applies and binds the scenario cleans up.
func (x *exampleRun) sub(t *testing.T) *exampleRun {
	return &exampleRun{t: t, k: &kube{t: t, e: x.k.e, ns: x.k.ns}, cluster: &kube{t: t, e: x.k.e}, scenario: x.root()}
}

// root is the scenario's run, whose cleanup removes what its subtests made.
func (x *exampleRun) root() *exampleRun {
	if x.scenario != nil {
		return x.scenario
	}
	return x
}

// apply applies the objects of file that keep returns true for (all when
// keep is nil).
func (x *exampleRun) apply(file string, keep func(exampleObject) bool) {
	x.t.Helper()
	var items []any
	for _, o := range readExample(x.t, file) {
		if keep != nil && !keep(o) {
			continue
		}
		if o.kind == "Pod" {
			checkBusybox(x.t, o)
		}
		x.root().objects = append(x.root().objects, o)
		items = append(items, o.doc)
	}
	list, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		x.t.Fatal(err)
	}
	if _, err := x.k.run(shortWait, string(list), "apply", "-f", "-"); err != nil {
		x.t.Fatalf("applying %s: %v", file, err)
	}
}

// checkBusybox: the example's pod runs the busybox image this machine
// has (no registry is reachable); any other image could not start here.
func checkBusybox(t *testing.T, o exampleObject) {
	t.Helper()
	spec, _ := o.doc["spec"].(map[string]any)
	containers, _ := spec["containers"].([]any)
	for _, c := range containers {
		if c := c.(map[string]any); c["image"] != busybox {
			t.Fatalf("%s: pod %s runs %v, not the examples' busybox %s", o.file, o.name, c["image"], busybox)
		}
	}
}

// bound waits for a claim and remembers its PV for the cleanup.
func (x *exampleRun) bound(pvc string) corev1.PersistentVolume {
	x.t.Helper()
	pv := x.k.waitBound(pvc)
	x.root().pvs = append(x.root().pvs, pv.Name)
	return pv
}

// execIn runs a shell command in a container of an example pod.
func (x *exampleRun) execIn(pod, container, script string) string {
	x.t.Helper()
	out, err := x.k.run(shortWait, "", "exec", pod, "-c", container, "--", "/bin/sh", "-c", script)
	if err != nil {
		x.t.Fatal(err)
	}
	return out
}

// reads starts a pod of its own on a claim and checks that /data/hello
// holds want.
func (x *exampleRun) reads(pvc, want string) {
	x.t.Helper()
	pod := "read-" + pvc
	x.k.createPod(podOpts{name: pod, pvc: pvc})
	x.k.waitRunning(pod)
	if got := strings.TrimSpace(x.k.mustExec(pod, "cat /data/hello")); got != want {
		x.t.Errorf("claim %s reads %q in /data/hello, want %q", pvc, got, want)
	}
}

func (x *exampleRun) cleanup() {
	x.release()
	for _, f := range x.after {
		f()
	}
}

// release deletes what the scenario applied, and waits until the driver
// has detached and deleted its volumes (a static PV's image stays).
func (x *exampleRun) release() {
	x.k.runQuiet(5*time.Minute, "delete", "pods", "--all", "--grace-period=1", "--wait=true", "--timeout=4m")
	x.k.runQuiet(5*time.Minute, "delete", "volumegroupsnapshots,volumesnapshots", "--all", "--ignore-not-found", "--wait=true", "--timeout=4m")
	x.k.runQuiet(5*time.Minute, "delete", "pvc", "--all", "--wait=true", "--timeout=4m")
	for _, o := range x.objects {
		if o.kind == "PersistentVolume" {
			x.cluster.runQuiet(5*time.Minute, "delete", "pv", o.name, "--ignore-not-found", "--wait=true", "--timeout=4m")
		}
	}
	// A class or a Secret key goes only after the volumes that need it.
	for _, pv := range x.pvs {
		x.k.runQuiet(5*time.Minute, "wait", "--for=delete", "pv/"+pv, "--timeout=4m")
		eventually(x.t, volumeWait, "PV "+pv+" detached", func() (bool, string) {
			vas := x.k.volumeAttachments(pv)
			return len(vas) == 0, describeVAs(vas)
		})
	}
	for _, o := range slices.Backward(x.objects) {
		if !o.namespaced && o.kind != "PersistentVolume" {
			x.cluster.runQuiet(time.Minute, "delete", strings.ToLower(o.kind), o.name, "--ignore-not-found", "--wait=true")
		}
	}
}
