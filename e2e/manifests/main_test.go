package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestMain runs the tests in deploy/ of the repository, wherever go test
// starts them: every path they read and every file they name in a failure
// is relative to deploy/, as a user reads the manifests.
func TestMain(m *testing.M) {
	root, err := repoRoot()
	if err == nil {
		err = os.Chdir(filepath.Join(root, "deploy"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "manifests:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// repoRoot walks up from the working directory to the go.mod of this
// module.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(data, []byte("module github.com/rbdcsi/rbdcsi\n")) {
			return dir, nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of github.com/rbdcsi/rbdcsi above the working directory")
		}
		dir = parent
	}
}
