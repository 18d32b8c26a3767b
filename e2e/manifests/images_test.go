package manifests

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestImages: every image is pinned by a tag that is not "latest"; the
// sidecars come from registry.k8s.io/sig-storage at the chosen majors, and
// the same tag is used for a sidecar everywhere: in the files, and in an
// install with changed-block tracking, whose sidecar is in a patch.
func TestImages(t *testing.T) {
	m := loadAll(t)
	ws := append(workloads(m), workloads(installedWithSnapshotMetadata(t))...)
	tags := map[string]string{}
	check := func(where, image string) {
		repo, tag := imageRepo(image)
		if tag == "" || tag == "latest" || strings.Contains(image, "@") {
			t.Errorf("%s: image %q must be pinned by a tag other than latest", where, image)
			return
		}
		if prev, ok := tags[repo]; ok && prev != tag {
			t.Errorf("%s: %s:%s, elsewhere :%s", where, repo, tag, prev)
		}
		tags[repo] = tag
		if major, ok := sidecarMajors[repo]; ok && !strings.HasPrefix(tag, major) {
			t.Errorf("%s: %s:%s, want a %sx tag", where, repo, tag, major)
		}
	}
	for _, w := range ws {
		for _, c := range append(slices.Clone(w.spec.InitContainers), w.spec.Containers...) {
			check(w.name+"/"+c.Name, c.Image)
			if c.ImagePullPolicy == corev1.PullAlways {
				t.Errorf("%s/%s: imagePullPolicy Always with a pinned tag", w.name, c.Name)
			}
		}
	}
	pods, from := all[*corev1.Pod](m)
	for i, p := range pods {
		for _, c := range p.Spec.Containers {
			check(from[i].String()+"/"+c.Name, c.Image)
		}
	}
	for repo := range sidecarMajors {
		if _, ok := tags[repo]; !ok {
			t.Errorf("no container runs %s", repo)
		}
	}
}
