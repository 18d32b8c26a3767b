package mapper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/command"
)

const testKey = "AQBexampleexampleexampleexampleexampleA=="

// fakeRunner records every command and answers from a script.
type fakeRunner struct {
	mu     sync.Mutex
	calls  [][]string
	answer func(argv []string) ([]byte, error)
}

func (f *fakeRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	argv := append([]string{name}, args...)
	f.mu.Lock()
	f.calls = append(f.calls, argv)
	f.mu.Unlock()
	if f.answer == nil {
		return nil, nil
	}
	return f.answer(argv)
}

func mapReq() MapRequest {
	return MapRequest{
		Image:   Image{ClusterID: "c1", Pool: "rbd", Name: "csi-vol-1"},
		MonHost: "v2:10.0.0.1:3300,v2:10.0.0.2:3300",
		Cred:    cluster.Credentials{ID: "csi-rbd", Key: testKey},
	}
}

func TestMapArgs(t *testing.T) {
	req := mapReq()
	req.Options = "noshare,lock_on_read"
	req.ReadOnly = true
	krbd := newCLI(KRBD, CLIOptions{}, nil)
	got := krbd.mapArgs(req, "/state/keys/key-1")
	want := []string{"device", "map", "--id=csi-rbd", "--mon-host=v2:10.0.0.1:3300,v2:10.0.0.2:3300",
		"--keyfile=/state/keys/key-1", "--options=noshare,lock_on_read,noudev,ms_mode=prefer-crc", "--read-only",
		"--pool=rbd", "--image=csi-vol-1"}
	if !slices.Equal(got, want) {
		t.Errorf("krbd map argv:\n got %q\nwant %q", got, want)
	}
	nbd := newCLI(NBD, CLIOptions{}, nil)
	got = nbd.mapArgs(req, "/k")
	if got[2] != "--device-type=nbd" || slices.Contains(got, "--options=noshare,lock_on_read,ms_mode=prefer-crc") {
		t.Errorf("nbd map argv %q: want the nbd device type and no krbd-only ms_mode", got)
	}
	for _, m := range []*rbdCLI{krbd, nbd} {
		for _, a := range m.mapArgs(req, "/k") {
			if strings.Contains(a, testKey) {
				t.Errorf("%s map argv holds the key: %q", m.name, a)
			}
		}
	}
	// A monitor list that speaks msgr1 needs no ms_mode; an explicit one
	// wins, and so does an explicit udev.
	req.MonHost, req.Options = "10.0.0.1:6789", ""
	if args := krbd.mapArgs(req, "/k"); !slices.Contains(args, "--options=noudev") {
		t.Errorf("msgr1 monitors: want noudev alone, got %q", args)
	}
	req.MonHost, req.Options = "v2:10.0.0.1:3300", "ms_mode=secure,udev"
	if args := krbd.mapArgs(req, "/k"); !slices.Contains(args, "--options=ms_mode=secure,udev") {
		t.Errorf("explicit ms_mode or udev lost: %q", args)
	}
	req.Image.Namespace = "tenant-1"
	if args := krbd.mapArgs(req, "/k"); !slices.Equal(args[len(args)-3:], []string{"--pool=rbd", "--namespace=tenant-1", "--image=csi-vol-1"}) {
		t.Errorf("namespaced image argv %q", args)
	}
	if got := krbd.unmapArgs("/dev/rbd3", "force"); !slices.Equal(got, []string{"device", "unmap", "--options=force,noudev", "/dev/rbd3"}) {
		t.Errorf("unmap argv %q", got)
	}
	if got := nbd.listArgs(); !slices.Equal(got, []string{"list-mapped", "--format", "json"}) {
		t.Errorf("nbd list argv %q", got)
	}
}

// TestMapKeyFile checks the key reaches rbd only through a 0600 file that
// is gone once the call returns.
func TestMapKeyFile(t *testing.T) {
	keys, err := PrepareKeyDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mapped := false
	var keyFile string
	root := t.TempDir()
	run := &fakeRunner{answer: func(argv []string) ([]byte, error) {
		switch {
		case slices.Contains(argv, "list"):
			t.Errorf("krbd ran `rbd device list`: %q (it reads sysfs)", argv)
		case slices.Contains(argv, "map"):
			for _, a := range argv {
				if f, ok := strings.CutPrefix(a, "--keyfile="); ok {
					keyFile = f
				}
			}
			st, err := os.Stat(keyFile)
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("key file %s during map: %v %v", keyFile, st, err)
			}
			if b, _ := os.ReadFile(keyFile); string(b) != testKey {
				t.Errorf("key file holds %q", b)
			}
			mapped = true
			krbdDevice(t, root, "0", "rbd", "", "csi-vol-1", "-")
			return []byte("/dev/rbd0\n"), nil
		}
		return nil, nil
	}}
	m := newCLI(KRBD, CLIOptions{Runner: run, Keys: keys, SysRoot: root}, nil)
	dev, err := m.Map(context.Background(), mapReq())
	if err != nil || dev != "/dev/rbd0" {
		t.Fatalf("Map: %q %v", dev, err)
	}
	if _, err := os.Stat(keyFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("key file %s still there after map: %v", keyFile, err)
	}
	for _, call := range run.calls {
		if strings.Contains(strings.Join(call, " "), testKey) {
			t.Errorf("argv holds the key: %q", call)
		}
	}
	// Mapped already: a retry maps nothing new.
	run.calls = nil
	if dev, err := m.Map(context.Background(), mapReq()); err != nil || dev != "/dev/rbd0" || len(run.calls) != 0 || !mapped {
		t.Errorf("repeated Map: %q %v, calls %q", dev, err, run.calls)
	}
}

func TestMapFailureRedactsAndClassifies(t *testing.T) {
	keys, _ := PrepareKeyDir(t.TempDir())
	run := &fakeRunner{answer: func(argv []string) ([]byte, error) {
		if slices.Contains(argv, "list-mapped") {
			return nil, nil
		}
		return nil, &command.Error{Cmd: "rbd device", Stderr: "did not load config file, using default settings.\n" +
			"2026-11-26T10:47:30.288+0000 7fd69a002640 -1 can't open ceph.conf: (2) No such file or directory\n" +
			"rbd: error opening image csi-vol-1: (2) No such file or directory; bad key " + testKey, Err: errors.New("exit status 2")}
	}}
	m := newCLI(NBD, CLIOptions{Runner: run, Keys: keys}, nil)
	_, err := m.Map(context.Background(), mapReq())
	if !errors.Is(err, ErrNotFound) {
		t.Errorf("Map of a missing image: %v, want ErrNotFound", err)
	}
	if err != nil && strings.Contains(err.Error(), testKey) {
		t.Errorf("error shows the key: %v", err)
	}
	if err != nil && (strings.Contains(err.Error(), "ceph.conf") || strings.Contains(err.Error(), "config file")) {
		t.Errorf("error keeps the tools' noise about a missing config file: %v", err)
	}
	if files, _ := os.ReadDir(string(keys)); len(files) != 0 {
		t.Errorf("key files left after a failed map: %v", files)
	}
}

func TestParseDeviceList(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      []Mapped
		err       bool
	}{
		{"empty", "", nil, false},
		{"none", "[]\n", nil, false},
		{"krbd", `[{"id":"0","pool":"rbd","namespace":"","name":"a","snap":"-","device":"/dev/rbd0"},
			{"id":"1","pool":"rbd","namespace":"","name":"a","snap":"s1","device":"/dev/rbd1"},
			{"id":"2","pool":"p2","namespace":"ns","name":"b","snap":"-","device":"/dev/rbd2"}]`,
			[]Mapped{{Image: Image{Pool: "rbd", Name: "a"}, Device: "/dev/rbd0"},
				{Image: Image{Pool: "p2", Namespace: "ns", Name: "b"}, Device: "/dev/rbd2"}}, false},
		{"nbd", `[{"id":4242,"pool":"rbd","namespace":"","image":"b","snap":"","device":"/dev/nbd0"}]`,
			[]Mapped{{Image: Image{Pool: "rbd", Name: "b"}, Device: "/dev/nbd0"}}, false},
		{"garbage", "rbd: warning", nil, true},
	} {
		got, err := parseDeviceList([]byte(tc.out))
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v %v, want %v (error %v)", tc.name, got, err, tc.want, tc.err)
		}
	}
}

// TestUnsupported: without the kernel module the mapper says so at once,
// naming the mounter choices, and maps nothing.
func TestUnsupported(t *testing.T) {
	root := t.TempDir()
	run := &fakeRunner{answer: func(argv []string) ([]byte, error) {
		if argv[0] == "modprobe" {
			return nil, errors.New("modprobe: FATAL: Module not found")
		}
		t.Errorf("unexpected command %q", argv)
		return nil, nil
	}}
	for _, m := range []Mapper{NewKRBD(CLIOptions{Runner: run, SysRoot: root}), NewNBD(CLIOptions{Runner: run, SysRoot: root})} {
		err := m.Supported(context.Background())
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "krbd, nbd, fuse") {
			t.Errorf("Supported: %v, want ErrUnsupported naming the choices", err)
		}
		// Still unsupported; modprobe is not tried again.
		_ = m.Supported(context.Background())
	}
	if len(run.calls) != 2 {
		t.Errorf("commands run: %q, want one modprobe per mapper", run.calls)
	}
	// With the module present the kernel check passes.
	if err := os.MkdirAll(filepath.Join(root, "sys/bus/rbd"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := NewKRBD(CLIOptions{Runner: run, SysRoot: root}).(*rbdCLI)
	if why := m.probe(root); why != "" {
		t.Errorf("probe with /sys/bus/rbd: %q", why)
	}
	fuse := NewFuse(FuseOptions{SysRoot: root, Dir: t.TempDir()})
	if err := fuse.Supported(context.Background()); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "/dev/fuse") {
		t.Errorf("fuse without /dev/fuse: %v", err)
	}
}

func TestPrepareKeyDirSweeps(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "key-123"), []byte(testKey), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := PrepareKeyDir(dir); err != nil {
		t.Fatal(err)
	}
	files, _ := os.ReadDir(dir)
	if len(files) != 1 || files[0].Name() != "other" {
		t.Errorf("after the sweep: %v", files)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("key dir mode %v", st.Mode())
	}
}

// TestUnmapByImage: a recorded device that now belongs to another image
// (a reboot renumbered them) is left alone.
func TestUnmapByImage(t *testing.T) {
	root := t.TempDir()
	krbdDevice(t, root, "0", "rbd", "", "other", "-")
	krbdDevice(t, root, "1", "rbd", "", "csi-vol-1", "-")
	run := &fakeRunner{}
	m := newCLI(KRBD, CLIOptions{Runner: run, SysRoot: root}, nil)
	img := mapReq().Image
	if err := m.Unmap(context.Background(), UnmapRequest{Image: img, Device: "/dev/rbd0"}); err != nil {
		t.Fatal(err)
	}
	last := run.calls[len(run.calls)-1]
	if !slices.Equal(last, []string{"rbd", "device", "unmap", "--options=noudev", "/dev/rbd1"}) {
		t.Errorf("unmapped %q, want /dev/rbd1 (the image's device)", last)
	}
	run.calls = nil
	img.Name = "gone"
	if err := m.Unmap(context.Background(), UnmapRequest{Image: img, Device: "/dev/rbd1"}); err != nil || len(run.calls) != 0 {
		t.Errorf("unmap of an image not mapped: %v, calls %q", err, run.calls)
	}
}

// A map that ran out of time, or that only complained about a missing
// ceph.conf, is not a missing image.
func TestClassifyIgnoresConfigNoiseAndTimeouts(t *testing.T) {
	noise := "did not load config file, using default settings.\n" +
		"2026-11-24T11:35:09.104+0000 7fa72b75c380 -1 Errors while parsing config file!\n" +
		"2026-11-24T11:35:09.104+0000 7fa72b75c380 -1 can't open ceph.conf: (2) No such file or directory\n"
	for name, err := range map[string]error{
		"timeout":      &command.Error{Cmd: "rbd device map", Stderr: noise, Err: fmt.Errorf("%w (after 1m0s)", context.DeadlineExceeded)},
		"other errors": &command.Error{Cmd: "rbd device map", Stderr: noise + "rbd: sysfs write failed\n", Err: errors.New("exit status 1")},
	} {
		if got := classify(err); errors.Is(got, ErrNotFound) {
			t.Errorf("%s: classified as a missing image: %v", name, got)
		}
	}
	missing := &command.Error{Cmd: "rbd device map", Stderr: noise + "rbd: error opening image x: (2) No such file or directory\n", Err: errors.New("exit status 2")}
	if got := classify(missing); !errors.Is(got, ErrNotFound) {
		t.Errorf("a missing image behind config noise: %v, want ErrNotFound", got)
	}
}

// An image whose features the kernel cannot map is the node's limit, not
// a missing image, and the error names the features and the remedies.
func TestClassifyFeatureMismatch(t *testing.T) {
	for stderr, features := range map[string]string{
		"rbd: sysfs write failed\nRBD image feature set mismatch. You can disable features unsupported by the kernel with \"rbd feature disable rbd/csi-vol-1 object-map fast-diff deep-flatten\".\n" +
			"In some cases useful info is found in syslog - try \"dmesg | tail\".\nrbd: map failed: (6) No such device or address\n": "object-map, fast-diff, deep-flatten",
		"rbd: sysfs write failed\nRBD image feature set mismatch. You can disable features unsupported by the kernel with \"rbd feature disable\".\n": "(which, the kernel log says)",
	} {
		got := classify(&command.Error{Cmd: "rbd device map", Stderr: stderr, Err: errors.New("exit status 6")})
		if !errors.Is(got, ErrUnsupported) || errors.Is(got, ErrNotFound) {
			t.Errorf("classified as %v, want ErrUnsupported only", got)
		}
		for _, want := range []string{"features " + features + " (", "mounter nbd", "imageFeatures: layering"} {
			if !strings.Contains(got.Error(), want) {
				t.Errorf("%q does not say %q", got, want)
			}
		}
	}
}

// In a container the rbd tool cannot read the kernel log, and a krbd map
// of an image with features the kernel lacks fails with ENXIO alone: the
// mapper compares the image's features with the kernel's list.
func TestKRBDMapOfUnmappableFeatures(t *testing.T) {
	keys, _ := PrepareKeyDir(t.TempDir())
	for supported, want := range map[string]string{"0x3d\n": "journaling", "0x7f\n": ""} {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "sys/bus/rbd"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "sys/bus/rbd/supported_features"), []byte(supported), 0o644); err != nil {
			t.Fatal(err)
		}
		run := &fakeRunner{answer: func(argv []string) ([]byte, error) {
			switch {
			case slices.Contains(argv, "info") && slices.Contains(argv, "--format=json"):
				return []byte(`{"features":["layering","exclusive-lock","journaling"]}`), nil
			}
			return nil, &command.Error{Cmd: "rbd device", Stderr: "rbd: sysfs write failed\nrbd: map failed: (6) No such device or address", Err: errors.New("exit status 6")}
		}}
		_, err := NewKRBD(CLIOptions{Runner: run, Keys: keys, SysRoot: root}).Map(context.Background(), mapReq())
		switch {
		case want == "" && errors.Is(err, ErrUnsupported):
			t.Errorf("kernel %s maps every feature, yet: %v", supported, err)
		case want != "" && (!errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "features "+want+" (")):
			t.Errorf("kernel %s: %v, want ErrUnsupported naming %s", supported, err, want)
		}
	}
}

// rbd-nbd does not say why it failed; the mapper asks `rbd info`, with the
// key file still there, whether the image is missing.
func TestNBDMapOfAMissingImage(t *testing.T) {
	keys, _ := PrepareKeyDir(t.TempDir())
	for _, exists := range []bool{false, true} {
		var infoArgs []string
		run := &fakeRunner{answer: func(argv []string) ([]byte, error) {
			switch {
			case slices.Contains(argv, "list-mapped"):
				return nil, nil
			case slices.Contains(argv, "info"):
				infoArgs = argv
				if f := strings.TrimPrefix(argv[4], "--keyfile="); fileMissing(f) {
					return nil, errors.New("the key file is gone before rbd info")
				}
				if exists {
					return []byte("{}"), nil
				}
				return nil, &command.Error{Cmd: "rbd info", Stderr: "rbd: error opening image csi-vol-1: (2) No such file or directory", Err: errors.New("exit status 2")}
			}
			return nil, &command.Error{Cmd: "rbd device map", Stderr: "rbd: rbd-nbd failed with error: /usr/bin/rbd-nbd: exit status: 1", Err: errors.New("exit status 22")}
		}}
		m := newCLI(NBD, CLIOptions{Runner: run, Keys: keys}, nil)
		_, err := m.Map(context.Background(), mapReq())
		if got := errors.Is(err, ErrNotFound); got == exists || infoArgs == nil {
			t.Errorf("image exists %v: map error %v (NotFound %v), rbd info %q", exists, err, got, infoArgs)
		}
		if files, _ := os.ReadDir(string(keys)); len(files) != 0 {
			t.Errorf("key files left after a failed map: %v", files)
		}
	}
}

func fileMissing(path string) bool {
	_, err := os.Stat(path)
	return err != nil
}

// A node with a crush location makes krbd read from the nearest replica,
// unless the StorageClass's map options choose read_from_replica or
// crush_location; nbd gets it as config (TestNBDReadAffinityConf), not
// as options.
func TestReadAffinity(t *testing.T) {
	loc := map[string]string{"zone": "zone-a", "host": "node-1"}
	krbd := newCLI(KRBD, CLIOptions{CrushLocation: loc}, nil)
	req := mapReq()
	if got := krbd.options(req); got != "noudev,ms_mode=prefer-crc,read_from_replica=localize,crush_location=host:node-1|zone:zone-a" {
		t.Errorf("krbd options %q", got)
	}
	for _, own := range []string{"read_from_replica=balance", "crush_location=rack:r1"} {
		req.Options = own
		if got := krbd.options(req); strings.Contains(got, "localize") || strings.Contains(got, "zone-a") {
			t.Errorf("the class's %s was overridden: %q", own, got)
		}
	}
	req.Options = "try-netlink"
	if got := newCLI(NBD, CLIOptions{CrushLocation: loc}, nil).options(req); strings.Contains(got, "read_from_replica") || strings.Contains(got, "crush_location") {
		t.Errorf("nbd options %q", got)
	}
	if got := newCLI(KRBD, CLIOptions{}, nil).options(mapReq()); strings.Contains(got, "read_from_replica") {
		t.Errorf("no crush location, yet %q", got)
	}
}

// A key directory must be memory-backed: /dev/shm (tmpfs) is, /proc and a
// directory that is not there are refused, naming why.
func TestCheckKeyDirInMemory(t *testing.T) {
	if err := CheckKeyDirInMemory("/dev/shm"); err != nil {
		t.Errorf("/dev/shm: %v", err)
	}
	if err := CheckKeyDirInMemory("/proc"); err == nil || !strings.Contains(err.Error(), "not in memory") {
		t.Errorf("/proc: %v", err)
	}
	if err := CheckKeyDirInMemory("/nonexistent/keys"); err == nil {
		t.Error("a missing directory passed")
	}
}
