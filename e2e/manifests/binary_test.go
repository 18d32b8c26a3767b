package manifests

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// pluginFlags is what `rbdplugin --help` says: flag name -> default ("" when
// none is shown).
type pluginFlags map[string]string

// The binary is built once per test run, from this checkout.
var (
	helpOnce sync.Once
	helpOut  pluginFlags
	helpErr  string
)

// loadPluginFlags builds ./cmd/rbdplugin and parses its --help.
func loadPluginFlags(t *testing.T) pluginFlags {
	t.Helper()
	helpOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rbdplugin-help-")
		if err != nil {
			helpErr = err.Error()
			return
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "rbdplugin")
		build := exec.Command("go", "build", "-o", bin, "./cmd/rbdplugin")
		build.Dir = ".."
		if out, err := build.CombinedOutput(); err != nil {
			helpErr = "go build ./cmd/rbdplugin: " + err.Error() + "\n" + string(out)
			return
		}
		// --help makes the flag set print its usage and the binary exit 2.
		// runs: $TMPDIR/rbdplugin-help-*/rbdplugin (built just above)
		out, _ := exec.Command(bin, "--help").CombinedOutput()
		helpOut = parseHelp(string(out))
		if len(helpOut) == 0 {
			helpErr = "no flags in rbdplugin --help:\n" + string(out)
		}
	})
	if helpErr != "" {
		t.Fatal(helpErr)
	}
	return helpOut
}

var (
	helpFlagLine = regexp.MustCompile(`^  -([A-Za-z0-9_.-]+)`)
	helpDefault  = regexp.MustCompile(`\(default "?([^")]*)"?\)\s*$`)
)

// parseHelp reads Go's flag.PrintDefaults format: "  -name type" then the
// indented usage, which ends with (default "x") when there is one.
func parseHelp(out string) pluginFlags {
	flags := pluginFlags{}
	current := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if m := helpFlagLine.FindStringSubmatch(line); m != nil {
			current = m[1]
			flags[current] = ""
			line = line[len(m[0]):] // short usages share the line
		}
		if current == "" {
			continue
		}
		if m := helpDefault.FindStringSubmatch(line); m != nil {
			flags[current] = m[1]
		}
	}
	return flags
}

func TestParseHelp(t *testing.T) {
	got := parseHelp(`Usage of rbdplugin:
  -drivername string
    	CSI driver name, as in the CSIDriver object (default "rbd.csi.rbdcsi.dev")
  -metrics-address string
    	host:port; empty turns metrics off
  -v value
    	number for the log level verbosity
  -x	a bool with a short usage
rbdplugin: flag: help requested
`)
	want := pluginFlags{"drivername": "rbd.csi.rbdcsi.dev", "metrics-address": "", "v": "", "x": ""}
	if len(got) != len(want) {
		t.Fatalf("parseHelp = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("parseHelp[%s] = %q, want %q", k, got[k], v)
		}
	}
}

// TestPluginFlagsExist: every flag a manifest passes to the plugin is one
// the binary defines, and the values the binary checks are valid.
func TestPluginFlagsExist(t *testing.T) {
	flags := loadPluginFlags(t)
	m := installed(t)
	if checkPluginFlags(t, kubernetesDir, workloads(m), flags) == 0 {
		t.Fatal("no plugin container in what deploy/site installs")
	}
}

// checkPluginFlags checks the plugin containers of ws (where names their
// source in messages) against the flags the binary defines, and returns how
// many it checked. A plugin container is one running the plugin image or
// named rbdplugin: the Helm chart may pull the image from a mirror.
func checkPluginFlags(t *testing.T, where string, ws []workload, flags pluginFlags) int {
	t.Helper()
	seen := 0
	for _, w := range ws {
		for _, c := range w.spec.Containers {
			if repo, _ := imageRepo(c.Image); repo != pluginRepo && c.Name != "rbdplugin" {
				continue
			}
			seen++
			if len(c.Command) != 0 {
				t.Errorf("%s: %s/%s: sets command %v; the image's entrypoint is the plugin", where, w.name, c.Name, c.Command)
			}
			args, err := flagArgs(c)
			if err != nil {
				t.Errorf("%s: %s: %v", where, w.name, err)
				continue
			}
			for name := range args {
				if _, ok := flags[name]; !ok {
					t.Errorf("%s: %s/%s: --%s is not a flag of rbdplugin", where, w.name, c.Name, name)
				}
			}
			if d := args["drivername"]; d != "" && !validDriverName(d) {
				t.Errorf("%s: %s/%s: --drivername=%q is not a valid CSI driver name", where, w.name, c.Name, d)
			}
		}
	}
	return seen
}

// validDriverName mirrors the CSI spec rule the plugin enforces.
func validDriverName(s string) bool {
	return len(s) <= 63 && regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`).MatchString(s)
}
