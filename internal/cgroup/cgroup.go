// Package cgroup caps a pod's I/O on one block device through cgroup v2's
// io.max, for the kernel mapper (krbd), which ignores librbd's QoS limits.
// It only writes files under a cgroup v2 root: the kubelet makes the pod
// cgroups, in either of its layouts.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Limits are io.max's four limits; 0 is no limit ("max").
type Limits struct {
	ReadBps, WriteBps, ReadIops, WriteIops uint64
}

// Zero reports whether no limit is set.
func (l Limits) Zero() bool { return l == Limits{} }

// ErrNoPod is returned when no cgroup of the pod exists under the root.
var ErrNoPod = errors.New("no cgroup of the pod")

// ErrNoV2 is returned when the root is not a cgroup v2 hierarchy with the
// io controller: limits then cannot be set, and the caller goes on
// without them.
var ErrNoV2 = errors.New("not a cgroup v2 hierarchy with the io controller")

// PodDir finds the pod's cgroup under root, in kubelet's systemd layout
// (kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice,
// '-' in the UID written '_') or its cgroupfs layout
// (kubepods/burstable/pod<uid>), for each QoS class (Guaranteed pods sit
// directly under kubepods).
func PodDir(root, podUID string) (string, error) {
	if podUID == "" || strings.ContainsAny(podUID, "/.") {
		return "", fmt.Errorf("pod UID %.60q is not one", podUID)
	}
	controllers, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil || !contains(strings.Fields(string(controllers)), "io") {
		return "", fmt.Errorf("%w: %s", ErrNoV2, root)
	}
	u := strings.ReplaceAll(podUID, "-", "_")
	candidates := []string{
		filepath.Join("kubepods.slice", "kubepods-pod"+u+".slice"),
		filepath.Join("kubepods", "pod"+podUID),
	}
	for _, class := range []string{"burstable", "besteffort"} {
		candidates = append(candidates,
			filepath.Join("kubepods.slice", "kubepods-"+class+".slice", "kubepods-"+class+"-pod"+u+".slice"),
			filepath.Join("kubepods", class, "pod"+podUID))
	}
	for _, c := range candidates {
		dir := filepath.Join(root, c)
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w %s under %s", ErrNoPod, podUID, root)
}

// SetIOMax writes the device's line of the cgroup's io.max. Every limit
// is written, 0 as "max", so a new set of limits also lifts old ones.
func SetIOMax(dir string, major, minor uint32, l Limits) error {
	line := fmt.Sprintf("%d:%d rbps=%s wbps=%s riops=%s wiops=%s\n", major, minor,
		value(l.ReadBps), value(l.WriteBps), value(l.ReadIops), value(l.WriteIops))
	f, err := os.OpenFile(filepath.Join(dir, "io.max"), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("io.max of %s: %w", dir, err)
	}
	_, err = f.WriteString(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %q to io.max of %s: %w", strings.TrimSpace(line), dir, err)
	}
	return nil
}

func value(v uint64) string {
	if v == 0 {
		return "max"
	}
	return strconv.FormatUint(v, 10)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
