package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The list the fixture suite (testdata/fixture) is held to, as a step's
// list would hold a real suite: [guest] is a machine with everything,
// [pacific] one whose librbd has no group snapshots.
const fixtureList = `
# the whole suite
[guest]
all
TestBlock
TestBlock/ext4
TestBlock/xfs
TestEncrypted
TestEncrypted/ext4
TestEncrypted/block
TestGroupSnapshot
TestGrowth
TestGrowth/online
TestFlaky

[pacific]
use guest
skip TestGroupSnapshot "before Tentacle" -- Pacific's librbd has no group snapshots

[nbd]
TestBlock
TestBlock/ext4
exclude TestBlock/xfs -- mkfs only: krbd's run has it
TestEncrypted
TestEncrypted/ext4
TestEncrypted/block
`

func writeList(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fixture.tests")
	if err := os.WriteFile(p, []byte(fixtureList), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runCheck(t *testing.T, parts ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	args := append([]string{"check", "-list", writeList(t), "-step", "kernel-test"}, parts...)
	err := cli(args, &out)
	return out.String(), err
}

func TestCheckPassesWhatTheListSays(t *testing.T) {
	out, err := runCheck(t, "guest=testdata/all-pass.json", "pacific=testdata/no-groups.json")
	if err != nil {
		t.Fatalf("check failed: %v\n%s", err, out)
	}
	for _, want := range []string{
		"kernel-test guest: ran 10, expected skips 0, unexpected skips 0\n",
		"kernel-test pacific: ran 9, expected skips 1, unexpected skips 0\n",
		"kernel-test: ran 19, expected skips 1, unexpected skips 0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

// A module missing in the guest makes its tests skip: the step fails and
// names them.
func TestMissingModuleFailsTheStep(t *testing.T) {
	out, err := runCheck(t, "pacific=testdata/no-dm-crypt.json")
	if !errors.Is(err, errFailed) {
		t.Fatalf("check passed a run whose encryption tests skipped:\n%s", out)
	}
	for _, want := range []string{
		"UNEXPECTED SKIP TestEncrypted: fixture_test.go:28: dm_crypt is not available here",
		"DID NOT RUN TestEncrypted/ext4 (listed)",
		"DID NOT RUN TestEncrypted/block (listed)",
		"unexpected skips 1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

// A subtest forced to skip (a capability the guest lost) fails the step,
// however deep it is.
func TestSubtestSkipFailsTheStep(t *testing.T) {
	out, err := runCheck(t, "pacific=testdata/no-cap.json")
	if err == nil || !strings.Contains(out, "UNEXPECTED SKIP TestGrowth/online: fixture_test.go:41: CAP_SYS_RESOURCE is not available here") {
		t.Fatalf("want the skipped subtest named, got %v:\n%s", err, out)
	}
}

func TestExpectedSkipMustHappenForItsReason(t *testing.T) {
	// Listed to skip on Pacific, but this run had group snapshots.
	out, err := runCheck(t, "pacific=testdata/all-pass.json")
	if err == nil || !strings.Contains(out, "WRONG SKIP TestGroupSnapshot: ran and passed") {
		t.Fatalf("want a wrong-skip report, got %v:\n%s", err, out)
	}
	// A skip the list does not expect: the full list has no skip.
	out, err = runCheck(t, "guest=testdata/no-groups.json")
	if err == nil || !strings.Contains(out, "UNEXPECTED SKIP TestGroupSnapshot: fixture_test.go:35: librbd has no group snapshots before Tentacle") {
		t.Fatalf("want an unexpected skip, got %v:\n%s", err, out)
	}
}

func TestFailureAndMissingRunsAreNamed(t *testing.T) {
	out, err := runCheck(t, "guest=testdata/one-fails.json", "nbd=testdata/does-not-exist.json")
	if err == nil {
		t.Fatalf("check passed:\n%s", out)
	}
	for _, want := range []string{
		"kernel-test guest: --- FAIL: TestFlaky",
		"the volume did not grow",
		"kernel-test nbd: DID NOT RUN TestBlock (listed)",
		"no test output: testdata/does-not-exist.json",
		// The summary line, the last a log's reader sees, names it too.
		"failed 1, not run 0, not listed 0, wrong skips 0; failing: TestFlaky",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

// A test that runs but is not listed fails the step: lists cannot go stale.
func TestUnlistedTestFailsTheStep(t *testing.T) {
	out, err := runCheck(t, "nbd=testdata/all-pass.json")
	if err == nil {
		t.Fatalf("check passed a run with tests outside the list:\n%s", out)
	}
	for _, want := range []string{"NOT LISTED TestBlock/xfs: ran, though listed as excluded", "NOT LISTED TestFlaky: ran but is not in the list"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

func TestArgs(t *testing.T) {
	list := writeList(t)
	for _, tc := range []struct{ section, want string }{
		{"guest", ""},
		{"nbd", "-test.run=^(TestBlock|TestEncrypted)$\n-test.skip=^(TestBlock)$/^(xfs)$\n"},
	} {
		var out bytes.Buffer
		if err := cli([]string{"args", "-list", list, tc.section}, &out); err != nil {
			t.Fatal(err)
		}
		if out.String() != tc.want {
			t.Errorf("[%s]: got %q, want %q", tc.section, out.String(), tc.want)
		}
	}
}

func TestListErrors(t *testing.T) {
	for _, tc := range []struct{ list, want string }{
		{"TestA\n", "before any [section]"},
		{"[a]\nskip TestA\n", "the reason is missing"},
		{"[a]\nTestA/b\n", "its parent TestA is not"},
		{"[a]\nexclude TestA -- no\nTestA/b\n", "its parent TestA is excluded"},
		{"[a]\nuse b\n", "no such section above"},
		{"[a]\nrm -rf\n", "is not a test name"},
		{"[a]\nskip TestA unquoted -- why\n", "must be quoted"},
	} {
		_, err := parseList(strings.NewReader(tc.list))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.list, err, tc.want)
		}
	}
	s, err := parseList(strings.NewReader("[a]\nTestA\nexclude TestB/x -- r\nexclude TestC/y -- r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s["a"].args(); err == nil || !strings.Contains(err.Error(), "not a full product") {
		t.Errorf("an exclusion that one -skip cannot express was accepted: %v", err)
	}
}

func TestSummaryWithoutList(t *testing.T) {
	var out bytes.Buffer
	if err := cli([]string{"summary", "-step", "kernel-test", "krbd=testdata/no-groups.json"}, &out); err != nil {
		t.Fatalf("a run with a skip and no failure failed: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "skipped TestGroupSnapshot: fixture_test.go:35: librbd has no group snapshots") {
		t.Errorf("the skip is not shown with its reason:\n%s", out.String())
	}
	out.Reset()
	if err := cli([]string{"summary", "-step", "kernel-test", "krbd=testdata/one-fails.json"}, &out); err == nil {
		t.Errorf("a failed run passed:\n%s", out.String())
	}
}

func TestPipeKeepsEventsAndShowsOutput(t *testing.T) {
	in, err := os.ReadFile("testdata/one-fails.json")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "events.json")
	var shown bytes.Buffer
	if err := pipe(bytes.NewReader(in), &shown, file); err != nil {
		t.Fatal(err)
	}
	kept, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(kept, in) {
		t.Errorf("the events were not kept as they came (%v)", err)
	}
	for _, want := range []string{"=== RUN   TestFlaky\n", "the volume did not grow\n", "--- FAIL: TestFlaky"} {
		if !strings.Contains(shown.String(), want) {
			t.Errorf("missing %q in the shown output:\n%s", want, shown.String())
		}
	}
}

// Every test of e2e/node runs in a guest of make kernel-test or is named in
// the list's [host-only] section with its reason: a new node test cannot
// be left out of the kernel test by oversight.
func TestKernelTestListPlacesEveryNodeTest(t *testing.T) {
	f, err := os.Open("../kernel-test.tests")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sections, err := parseList(f)
	if err != nil {
		t.Fatal(err)
	}
	placed := map[string]string{}
	for _, name := range []string{"krbd", "nbd", "host-only"} {
		s := sections[name]
		if s == nil {
			t.Fatalf("scripts/kernel-test.tests has no [%s]", name)
		}
		for n, e := range s.Entries {
			if !strings.Contains(n, "/") && (name == "host-only" || e.Kind != excluded) {
				placed[n] = name
			}
		}
	}
	files, err := filepath.Glob("../../e2e/node/*_test.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no e2e/node tests found (%v)", err)
	}
	found := 0
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]*)\(t \*testing\.T\)`).FindAllStringSubmatch(string(src), -1) {
			found++
			if placed[m[1]] == "" {
				t.Errorf("%s (%s) is in no guest's section of scripts/kernel-test.tests, nor in [host-only]", m[1], filepath.Base(file))
			}
		}
	}
	if found < 20 {
		t.Errorf("found only %d tests in e2e/node: the pattern no longer matches", found)
	}
}

// Every section of the project's lists that names tests to run gives its
// go test arguments: a section the steps cannot turn into -run and -skip
// (excluded names of different depths, say) fails here, not in a guest.
func TestListsGiveArgs(t *testing.T) {
	for _, list := range []string{"../kernel-test.tests", "../ceph-matrix.tests", "../k8s-e2e.tests"} {
		f, err := os.Open(list)
		if err != nil {
			t.Fatal(err)
		}
		sections, err := parseList(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", list, err)
		}
		for name, s := range sections {
			if name == "host-only" {
				continue // names what no guest runs
			}
			if _, err := s.args(); err != nil {
				t.Errorf("%s [%s]: %v", filepath.Base(list), name, err)
			}
		}
	}
}
