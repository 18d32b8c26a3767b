package mapper

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// With a crush location, rbd-nbd gets read affinity as config, in a file
// handed over by --conf on map and re-attach alike; the file is written
// once, rewritten when the location changes, and kept. Without one, no
// --conf: the daemon reads what it always did.
func TestNBDReadAffinityConf(t *testing.T) {
	dir := t.TempDir()
	keys, _ := PrepareKeyDir(t.TempDir())
	run := &fakeRunner{answer: func(argv []string) ([]byte, error) {
		if slices.Contains(argv, "list-mapped") {
			return nil, nil
		}
		return []byte("/dev/nbd0\n"), nil
	}}
	loc := map[string]string{"zone": "zone-a", "host": "node-1"}
	nbd := newCLI(NBD, CLIOptions{Runner: run, Keys: keys, CrushLocation: loc, ConfDir: dir}, nil)
	req := mapReq()
	req.Cookie = "c00k1e"
	if _, err := nbd.Map(context.Background(), req); err != nil {
		t.Fatalf("Map: %v", err)
	}
	if err := nbd.Reattach(context.Background(), req, "/dev/nbd0"); err != nil {
		t.Fatalf("Reattach: %v", err)
	}
	conf := "--conf=" + filepath.Join(dir, nbdConfName)
	for _, sub := range []string{"map", "attach"} {
		i := slices.IndexFunc(run.calls, func(c []string) bool { return len(c) > 2 && c[2] == sub })
		if i < 0 || !slices.Contains(run.calls[i], conf) {
			t.Errorf("rbd device %s without %s: %q", sub, conf, run.calls)
		}
	}
	want := "[client]\nrbd_read_from_replica_policy = localize\ncrush_location = host=node-1 zone=zone-a\n"
	if b, err := os.ReadFile(filepath.Join(dir, nbdConfName)); err != nil || string(b) != want {
		t.Errorf("config file %q, %v; want %q", b, err, want)
	}

	moved := newCLI(NBD, CLIOptions{Runner: run, Keys: keys, CrushLocation: map[string]string{"zone": "zone-b"}, ConfDir: dir}, nil)
	if _, err := moved.Map(context.Background(), req); err != nil {
		t.Fatalf("Map: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, nbdConfName)); !strings.Contains(string(b), "crush_location = zone=zone-b\n") {
		t.Errorf("config file after the node moved: %q", b)
	}
	if files, _ := os.ReadDir(dir); len(files) != 1 {
		t.Errorf("config directory holds %v, want the file alone", files)
	}

	run.calls = nil
	plain := newCLI(NBD, CLIOptions{Runner: run, Keys: keys, ConfDir: t.TempDir()}, nil)
	if _, err := plain.Map(context.Background(), req); err != nil {
		t.Fatalf("Map: %v", err)
	}
	for _, c := range run.calls {
		if slices.ContainsFunc(c, func(a string) bool { return strings.HasPrefix(a, "--conf") }) {
			t.Errorf("no crush location, yet %q", c)
		}
	}
	if _, err := newCLI(NBD, CLIOptions{Runner: run, Keys: keys, CrushLocation: loc}, nil).Map(context.Background(), req); err == nil {
		t.Error("read affinity without a config directory mapped")
	}
}
