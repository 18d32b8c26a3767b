package mapper

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/command"
)

// The tools' words for a refused user (Ceph 16's rbd and rbd-nbd, as they
// answer a user without osd caps and a key that is not the user's) are a
// refusal, neither a missing image ("error opening image") nor an
// unreachable cluster ("couldn't connect", "failed to fetch mon config"),
// and say whether the monitors or the OSDs refused.
func TestClassifyRefusals(t *testing.T) {
	exit13 := exec.Command("sh", "-c", "exit 13").Run()
	for name, tc := range map[string]struct {
		err      *command.Error
		rejected bool
	}{
		"osd caps": {&command.Error{Cmd: "rbd info", Stderr: "librbd::image::OpenRequest: failed to stat v2 image header: (1) Operation not permitted\n" +
			"rbd: error opening image csi-vol-1: (1) Operation not permitted", Err: errors.New("exit status 1")}, false},
		"krbd osd caps": {&command.Error{Cmd: "rbd device", Stderr: "rbd: sysfs write failed\nrbd: map failed: (1) Operation not permitted", Err: errors.New("exit status 1")}, false},
		"unknown user": {&command.Error{Cmd: "rbd device", Stderr: "monclient(hunting): handle_auth_bad_method server allowed_methods [2] but i only support [2]\n" +
			"rbd: couldn't connect to the cluster!", Err: errors.New("exit status 13")}, true},
		"exit 13":   {&command.Error{Cmd: "rbd device", Stderr: "rbd: couldn't connect to the cluster!", Err: exit13}, true},
		"krbd auth": {&command.Error{Cmd: "rbd device", Stderr: "rbd: sysfs write failed\nrbd: map failed: (13) Permission denied", Err: errors.New("exit status 13")}, true},
		// rbd-nbd's own words, as `rbd device map -t nbd` passes them on
		"nbd osd caps": {&command.Error{Cmd: "rbd device", Stderr: "librbd::image::OpenRequest: failed to stat v2 image header: (1) Operation not permitted\n" +
			"librbd::ImageState: 0x55deb51a0f10 failed to open image: (1) Operation not permitted\nrbd: rbd-nbd failed with error: /usr/bin/rbd-nbd: exit status: 1", Err: errors.New("exit status 22")}, false},
		"nbd rejected": {&command.Error{Cmd: "rbd device", Stderr: "monclient(hunting): handle_auth_bad_method server allowed_methods [2] but i only support [2]\n" +
			"failed to fetch mon config (--no-mon-config to skip)\nrbd: rbd-nbd failed with error: /usr/bin/rbd-nbd: exit status: 1", Err: errors.New("exit status 22")}, true},
	} {
		got := classify(tc.err)
		if !errors.Is(got, ErrPermission) || errors.Is(got, ErrNotFound) || errors.Is(got, ErrUnavailable) {
			t.Errorf("%s: classified as %v, want ErrPermission only", name, got)
		}
		if errors.Is(got, errRejected) != tc.rejected {
			t.Errorf("%s: rejected by the monitors %v, want %v", name, errors.Is(got, errRejected), tc.rejected)
		}
	}
	timedOut := &command.Error{Cmd: "rbd device", Stderr: "rbd: couldn't connect to the cluster!", Err: errors.New("exit status 110")}
	if got := classify(timedOut); errors.Is(got, ErrPermission) || !errors.Is(got, ErrUnavailable) {
		t.Errorf("a connection that timed out: %v, want ErrUnavailable", got)
	}
}

// A refused map names the user, what it was refused on, the caps to grant
// and where the install guide lists them, never the key.
func TestRefusedMapNamesUserAndCaps(t *testing.T) {
	keys, _ := PrepareKeyDir(t.TempDir())
	osdRefusal := &command.Error{Cmd: "rbd info", Stderr: "rbd: error opening image csi-vol-1: (1) Operation not permitted; key " + testKey, Err: errors.New("exit status 1")}
	authRefusal := &command.Error{Cmd: "rbd device", Stderr: "monclient(hunting): handle_auth_bad_method\nrbd: couldn't connect to the cluster!", Err: errors.New("exit status 13")}
	for name, tc := range map[string]struct {
		mapper    string
		ns        string
		mapErr    error
		infoErr   error
		want      []string
		wantProbe bool
	}{
		"krbd": {KRBD, "", &command.Error{Cmd: "rbd device", Stderr: "rbd: sysfs write failed\nrbd: map failed: (1) Operation not permitted", Err: errors.New("exit status 1")}, nil,
			[]string{"Ceph refused client.csi-rbd on pool rbd:", "osd 'profile rbd pool=rbd'", cluster.CapsDoc, "ceph auth get client.csi-rbd"}, false},
		"nbd in a namespace": {NBD, "t1", &command.Error{Cmd: "rbd device", Stderr: "rbd: rbd-nbd failed with error: /usr/bin/rbd-nbd: exit status: 1", Err: errors.New("exit status 22")}, osdRefusal,
			[]string{"Ceph refused client.csi-rbd on pool rbd, namespace t1:", "osd 'profile rbd pool=rbd namespace=t1'", cluster.CapsDoc, "(1) Operation not permitted"}, true},
		"nbd rejected": {NBD, "", &command.Error{Cmd: "rbd device", Stderr: "rbd: rbd-nbd failed with error: /usr/bin/rbd-nbd: exit status: 1", Err: errors.New("exit status 22")}, authRefusal,
			[]string{"the Ceph monitors v2:10.0.0.1:3300,v2:10.0.0.2:3300 refused client.csi-rbd", "userKey", cluster.CapsDoc}, true},
		"krbd rejected": {KRBD, "", authRefusal, nil,
			[]string{"the Ceph monitors v2:10.0.0.1:3300,v2:10.0.0.2:3300 refused client.csi-rbd", "ceph auth get client.csi-rbd"}, false},
	} {
		probed := false
		run := &fakeRunner{answer: func(argv []string) ([]byte, error) {
			switch {
			case slices.Contains(argv, "list-mapped"):
				return nil, nil
			case slices.Contains(argv, "info"):
				probed = true
				return nil, tc.infoErr
			}
			return nil, tc.mapErr
		}}
		m := newCLI(tc.mapper, CLIOptions{Runner: run, Keys: keys}, func(string) string { return "" })
		req := mapReq()
		req.Image.Namespace = tc.ns
		_, err := m.Map(context.Background(), req)
		if !errors.Is(err, ErrPermission) {
			t.Errorf("%s: %v, want ErrPermission", name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", name, err, w)
			}
		}
		if strings.Contains(err.Error(), testKey) {
			t.Errorf("%s: the error shows the key: %v", name, err)
		}
		if probed != tc.wantProbe {
			t.Errorf("%s: rbd info asked %v, want %v", name, probed, tc.wantProbe)
		}
	}
}
