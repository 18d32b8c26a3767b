package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Map options reach `rbd device map` as one argv element, --options=LIST,
// never through a shell: ';', '|' and ':' are the documented syntax
// ("krbd:crush_location=host:a|zone:b;nbd:try-netlink"), not a danger. What
// must hold is what the mappers and the tools read from LIST.
var (
	// An option's name: lower-case words, never a flag.
	optionKey = regexp.MustCompile(`^[a-z][a-z_-]*$`)
	// An option's value: no path, no second option (',' or '='), no
	// mapper list (';'), nothing a terminal or a log would mangle.
	optionVal = regexp.MustCompile(`^[A-Za-z0-9_.:|-]+$`)
)

// driverOwned are options that name a file, a key, an identity or the
// device: the driver sets them itself, a StorageClass never may.
var driverOwned = []string{
	"conf", "keyring", "keyfile", "key", "secret", "name", "id", "mon_host", "mon_addr", "fsid", "ip",
	"log_file", "log-file", "admin_socket", "admin-socket", "quiesce-hook", "quiesce_hook",
	"encryption-passphrase-file", "device", "read_only", "ro", "rw", "options", "cookie",
}

// checkOptionLists asserts what an accepted mapOptions or unmapOptions
// value promises the node: every mapper's list comes out of it without
// error, the lists put together are the value itself, fuse gets none, and
// each list is well-formed key[=value] options the driver does not own.
func checkOptionLists(param, value string) error {
	if len(value) > 512 {
		return fmt.Errorf("%s of %d bytes accepted", param, len(value))
	}
	want := map[string]string{}
	if m, _, _ := strings.Cut(value, ":"); slices.Contains(Mounters(), m) {
		for _, part := range strings.Split(value, ";") {
			m, opts, ok := strings.Cut(part, ":")
			if _, dup := want[m]; !ok || dup || !slices.Contains(Mounters(), m) {
				return fmt.Errorf("%s %q accepted, though its part %q is not a mapper of its own", param, value, part)
			}
			want[m] = opts
		}
	} else {
		want["krbd"] = value
	}
	for _, m := range Mounters() {
		opts, err := OptionsFor(param, value, m)
		if err != nil {
			return fmt.Errorf("%s %q accepted, but the node cannot take it for %s: %v", param, value, m, err)
		}
		if opts != want[m] {
			return fmt.Errorf("%s %q gives %s the options %q, want %q", param, value, m, opts, want[m])
		}
		if m == "fuse" && opts != "" {
			return fmt.Errorf("%s %q gives fuse options %q; fuse takes none", param, value, opts)
		}
		if opts == "" {
			continue
		}
		for _, o := range strings.Split(opts, ",") {
			if err := wellFormedOption(o); err != nil {
				return fmt.Errorf("%s %q gives %s %w", param, value, m, err)
			}
		}
	}
	return nil
}

// wellFormedOption: one well-formed key[=value] option the driver does not own.
func wellFormedOption(o string) error {
	k, v, hasVal := strings.Cut(o, "=")
	if !optionKey.MatchString(k) || hasVal && !optionVal.MatchString(v) {
		return fmt.Errorf("the malformed option %q", o)
	}
	if slices.Contains(driverOwned, k) {
		return fmt.Errorf("the option %q, which the driver sets itself", k)
	}
	return nil
}

// never are mkfs flags no StorageClass may pass: they name a file or a
// device of the node, or force, fake or skip the format.
var never = map[string][]string{
	"ext4": {"-c", "-d", "-F", "-J", "-l", "-M", "-n", "-S", "-t", "-V", "-z"},
	"xfs":  {"-c", "-f", "-N", "-p", "-r", "-V"},
}

// valued are the flags that take a value, as mke2fs(8) and mkfs.xfs(8)
// read them (getopt: "-L x" or "-Lx").
var valued = map[string]string{"ext4": "bCdeEgGiIJlLmMNoOrRstTUz", "xfs": "bcdilLmnprs"}

// checkMkfsArgs asserts what accepted mkfsOptions promise: plain printable
// arguments with no path, read as mkfs's getopt reads them: each is a
// short flag, alone unless it takes a value, or the value of the valued
// flag just before it, and a value
// never starts with '-' (so "-L -m0" cannot hide -m0 in a label); no flag
// is one of never.
func checkMkfsArgs(fs string, args []string) error {
	if len(strings.Join(args, " ")) > 512 {
		return fmt.Errorf("mkfs options of more than 512 bytes accepted: %q", args)
	}
	for _, a := range args {
		for _, c := range a {
			if c <= ' ' || c > '~' || c == '/' || c == '\\' || c == '"' || c == '\'' || c == '`' || c == '$' {
				return fmt.Errorf("mkfs.%s argument %q holds %q", fs, a, c)
			}
		}
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' || a[1] == '-' {
			return fmt.Errorf("mkfs.%s argument %q of %q is neither a short flag nor a flag's value", fs, a, args)
		}
		if slices.Contains(never[fs], a[:2]) {
			return fmt.Errorf("mkfs.%s flag %q accepted in %q", fs, a[:2], args)
		}
		if !strings.Contains(valued[fs], a[1:2]) {
			if len(a) > 2 {
				// getopt reads "-qF" as -q -F.
				return fmt.Errorf("mkfs.%s argument %q accepted: flags bundled behind %s", fs, a, a[:2])
			}
			continue
		}
		value := a[2:]
		if value == "" {
			if i+1 == len(args) {
				return fmt.Errorf("mkfs.%s flag %s accepted without its value in %q", fs, a, args)
			}
			i++
			value = args[i]
		}
		if strings.HasPrefix(value, "-") {
			return fmt.Errorf("mkfs.%s flag %s accepted with the value %q, which getopt reads but a reader takes for a flag", fs, a[:2], value)
		}
	}
	return nil
}

// The checkers above are the fuzz target's invariants: they pass what the
// documented syntax allows and catch each shape they exist for.
func TestFuzzInvariants(t *testing.T) {
	for param, value := range map[string]string{
		ParamMapOptions:   "krbd:lock_on_read,crush_location=host:a|zone:b;nbd:try-netlink,io-timeout=30",
		ParamUnmapOptions: "krbd:force",
	} {
		if err := checkOptionLists(param, value); err != nil {
			t.Errorf("documented syntax fails the invariant: %v", err)
		}
	}
	if err := checkOptionLists(ParamMapOptions, "lock_on_read,queue_depth=128"); err != nil {
		t.Errorf("a plain list fails the invariant: %v", err)
	}
	if err := checkMkfsArgs("ext4", []string{"-m0", "-E", "nodiscard", "-L", "data"}); err != nil {
		t.Errorf("plain mkfs options fail the invariant: %v", err)
	}
	for _, bad := range []struct{ fs, args string }{
		{"ext4", "-L -m0"}, {"ext4", "-d root"}, {"ext4", "-F"}, {"ext4", "nodiscard"}, {"ext4", "--lazy"},
		{"ext4", "-L a/b"}, {"xfs", "-f"}, {"xfs", "-K -N"}, {"ext4", "-L a$b"},
		{"ext4", "-qF"}, {"xfs", "-KN"}, {"ext4", "-L"}, {"ext4", "-m0 5"},
	} {
		if checkMkfsArgs(bad.fs, strings.Fields(bad.args)) == nil {
			t.Errorf("mkfs.%s %q passes the invariant", bad.fs, bad.args)
		}
	}
	if checkMkfsArgs("ext4", []string{"-L", "a\x00"}) == nil {
		t.Error("a NUL byte passes the mkfs invariant")
	}
	// The parser refuses these before the checker sees them; the checker's
	// own test of one option must refuse them as well.
	for _, o := range []string{"conf", "id=admin", "-o", "a=b/c", "a=b=c", "Key", "a= b", ""} {
		if wellFormedOption(o) == nil {
			t.Errorf("option %q passes the invariant", o)
		}
	}
}

func FuzzParseParams(f *testing.F) {
	// cluster, pool, imageFeatures, mounter, fstype, mapOptions, unmapOptions, mkfsOptions
	f.Add("c1", "rbd", "layering", "", "", "lock_on_read", "", "-m0")
	f.Add("", "", "", "", "", "", "", "")
	f.Add("c", "p", "layering,exclusive-lock", "krbd", "ext4", "krbd:lock_on_read;nbd:try-netlink,io-timeout=30", "krbd:force", "-E nodiscard")
	f.Add("c", "p", "", "nbd", "xfs", "krbd:read_from_replica=localize,crush_location=host:node-1|zone:z1", "", "-K -l size=64m")
	f.Add("c", "p", "layering,exclusive-lock,journaling", "nbd", "", "nbd:reattach-timeout=300", "", "-L -m0")
	f.Add("c", "p", "", "fuse", "", "fuse:notrim", "", "-T-n")
	f.Add("c", "p", "", "", "", "ro --id=admin", "", "-d /var/lib")
	f.Fuzz(func(t *testing.T, cluster, pool, features, mounter, fsType, mapOpts, unmapOpts, mkfs string) {
		in := map[string]string{"clusterID": cluster, "pool": pool, "imageFeatures": features, "mounter": mounter,
			"csi.storage.k8s.io/fstype": fsType, "mapOptions": mapOpts, "unmapOptions": unmapOpts, "mkfsOptions": mkfs}
		for k, v := range in {
			if v == "" && k != "clusterID" && k != "pool" {
				delete(in, k)
			}
		}
		p, err := ParseParams(in)
		if err != nil {
			return
		}
		// What the controller accepts, the node accepts from the volume
		// context, and reads the same.
		back, err := ParseVolumeContext(p.VolumeContext())
		if err != nil {
			t.Fatalf("ParseParams accepted %q, but its volume context %q is refused: %v", in, p.VolumeContext(), err)
		}
		if back.ClusterID != p.ClusterID || back.Pool != p.Pool || back.Mounter != p.Mounter ||
			back.MapOptions != p.MapOptions || back.UnmapOptions != p.UnmapOptions || !slices.Equal(back.MkfsOptions, p.MkfsOptions) {
			t.Fatalf("volume context of %q reads back as %+v, not %+v", in, back, p)
		}
		for param, value := range map[string]string{ParamMapOptions: p.MapOptions, ParamUnmapOptions: p.UnmapOptions} {
			if err := checkOptionLists(param, value); err != nil {
				t.Fatal(err)
			}
		}
		fs := p.FsType
		if fs == "" {
			fs = DefaultFsType
		}
		if err := checkMkfsArgs(fs, p.MkfsOptions); err != nil {
			t.Fatal(err)
		}
		if p.ImageFeatures != nil {
			if !slices.Contains(p.ImageFeatures, "layering") {
				t.Fatalf("features %q accepted without layering", p.ImageFeatures)
			}
			for _, f := range p.ImageFeatures {
				for _, need := range imageFeatures[f] {
					if !slices.Contains(p.ImageFeatures, need) {
						t.Fatalf("features %q accepted: %s without %s", p.ImageFeatures, f, need)
					}
				}
			}
			if slices.Contains(p.ImageFeatures, "journaling") && p.Mounter != "nbd" && p.Mounter != "fuse" {
				t.Fatalf("journaling accepted for mounter %q, which may be krbd", p.Mounter)
			}
		}
		// Options needing a feature were checked against the features the
		// image will get (the defaults for a single writer have them all).
		if _, err := p.VolumeFeatures(false); err != nil {
			t.Fatalf("ParseParams accepted %q, but a single-writer volume of it is refused: %v", in, err)
		}
		if p.ImageFeatures != nil {
			if _, err := p.VolumeFeatures(true); err != nil {
				t.Fatalf("ParseParams accepted %q with its features, but a multi-writer volume of it is refused: %v", in, err)
			}
		}
	})
}
