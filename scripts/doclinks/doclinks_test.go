package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func TestSlug(t *testing.T) {
	for title, want := range map[string]string{
		"Install with Helm":                        "install-with-helm",
		"CI":                                       "ci",
		"Ceph releases (`make ceph-matrix`)":       "ceph-releases-make-ceph-matrix",
		"A real kernel: krbd and nbd":              "a-real-kernel-krbd-and-nbd",
		"`--node-registry` and the node's user":    "--node-registry-and-the-nodes-user",
		"**Keys**: AES and AES256K":                "keys-aes-and-aes256k",
		"See [the guide](install.md#x) now":        "see-the-guide-now",
		"Fencing a node that was cut off":          "fencing-a-node-that-was-cut-off",
		"rbd_max_part & friends":                   "rbd_max_part--friends",
		"Überblick, 1.2.3":                         "überblick-123",
		"StorageClass <code>parameters</code>":     "storageclass-parameters",
		"Several Kubernetes clusters on one pool?": "several-kubernetes-clusters-on-one-pool",
	} {
		if got := slug(title); got != want {
			t.Errorf("slug(%q) = %q, want %q", title, got, want)
		}
	}
}

func TestParseAnchorsAndLinks(t *testing.T) {
	d := parse(strings.Join([]string{
		"# Title",
		"## Usage ##",
		"## Usage",
		"## Usage",
		"Text with [a link](other.md#usage) and ![img](img/a.png \"title\").",
		"Code `[not](a-link.md)` and [one](<dir/with space.md>).",
		"```sh",
		"# not a heading",
		"[nor](a-link.md)",
		"```",
		"~~~~",
		"```",
		"[still code](x.md)",
		"~~~~",
		"[ref]: ref-target.md#frag",
		`<a name="custom-anchor"></a>`,
		"[nested (parens)](file_(1).md) [http](https://example.com/x)",
		"    indented [continuation](cont.md)",
		"    # indented, not a heading",
	}, "\n"))
	wantAnchors := []string{"title", "usage", "usage-1", "usage-2", "custom-anchor"}
	for _, a := range wantAnchors {
		if !d.anchors[a] {
			t.Errorf("anchor %q missing; have %v", a, d.anchors)
		}
	}
	if len(d.anchors) != len(wantAnchors) {
		t.Errorf("anchors %v, want exactly %v", d.anchors, wantAnchors)
	}
	var got []string
	for _, l := range d.links {
		got = append(got, fmt.Sprintf("%d %s", l.line, l.dest))
	}
	want := []string{
		"5 other.md#usage", "5 img/a.png", "6 dir/with space.md",
		"15 ref-target.md#frag", "17 file_(1).md", "17 https://example.com/x", "18 cont.md",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("links:\n got %q\nwant %q", got, want)
	}
}

func TestCheck(t *testing.T) {
	files := map[string]string{
		"README.md": strings.Join([]string{
			"# Top",
			"[ok](docs/install.md) [ok](docs/install.md#pool-and-users) [ok](#top)",
			"[ok](docs/) [ok](deploy/kubernetes) [ok](deploy/kubernetes/node.yaml#L10)",
			"[ok](https://github.com/x/y#whatever) [ok](mailto:a@b.c) [ok](//host/x)",
			"[bad](docs/missing.md)",
			"[bad](docs/install.md#no-such-heading)",
			"[bad](#nowhere)",
			"[bad](../outside.md)",
			"[ok](/docs/install.md#uninstall) [ok](docs/install%20guide.md)",
		}, "\n"),
		"docs/install.md": strings.Join([]string{
			"# Install",
			"## Pool and users",
			"## Uninstall",
			"[ok](../README.md#top) [bad](reference.md#flags) [ok](install.md#install)",
		}, "\n"),
		"docs/install guide.md":       "# Guide\n",
		"deploy/kubernetes/node.yaml": "kind: DaemonSet\n",
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	tr := newTree(names, func(name string) (string, error) {
		text, ok := files[name]
		if !ok {
			return "", os.ErrNotExist
		}
		return text, nil
	})
	problems, err := check(tr)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"README.md:5: docs/missing.md: no file or directory docs/missing.md in the repository",
		`README.md:6: docs/install.md#no-such-heading: no heading or id "no-such-heading" in docs/install.md`,
		`README.md:7: #nowhere: no heading or id "nowhere" in README.md`,
		"README.md:8: ../outside.md: points out of the repository",
		"docs/install.md:4: reference.md#flags: no file or directory docs/reference.md in the repository",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n got %q\nwant %q", got, want)
	}
}

// TestRepoFiles runs the command's file listing on a real git repository:
// tracked and untracked files count, ignored and deleted ones do not.
func TestRepoFiles(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed:", err)
	}
	dir := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("init", "-q")
	write(".gitignore", "/results/\n")
	write("README.md", "[x](docs/a.md)\n")
	write("gone.md", "x\n")
	write("results/run.md", "x\n")
	run("add", ".gitignore", "README.md", "gone.md")
	write("docs/a.md", "# A\n")
	if err := os.Remove(filepath.Join(dir, "gone.md")); err != nil {
		t.Fatal(err)
	}
	got, err := repoFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	want := []string{".gitignore", "README.md", "docs/a.md"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("repoFiles = %q, want %q", got, want)
	}
}
