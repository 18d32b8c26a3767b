package kms

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Bounds of a mounted Secret: a Kubernetes Secret holds at most 1 MiB.
const (
	maxSecretFiles     = 256
	maxSecretFileBytes = 64 << 10
)

// SecretsFromDir reads a Kubernetes Secret mounted as a volume (one file
// per key) into the map Config.Open takes: the controller's own Secret,
// whose KEKs the key rotation uses. It is read anew at each call, so an
// updated Secret (kubelet swaps the files) is seen without a restart.
// The kubelet's own entries (..data and its timestamped directory) and
// directories are skipped; values lose surrounding white space. Errors
// name files, never their content.
func SecretsFromDir(dir string) (map[string]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the secret directory: %w", err)
	}
	out := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "..") {
			continue
		}
		path := filepath.Join(dir, name)
		st, err := os.Stat(path) // follows the kubelet's symlinks
		if err != nil {
			return nil, fmt.Errorf("secret directory: %w", err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		if len(out) == maxSecretFiles {
			return nil, fmt.Errorf("secret directory %s holds more than %d keys", dir, maxSecretFiles)
		}
		if st.Size() > maxSecretFileBytes {
			return nil, fmt.Errorf("secret directory: %s holds %d bytes, more than %d", path, st.Size(), maxSecretFileBytes)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("secret directory: %w", err)
		}
		out[name] = strings.TrimSpace(string(b))
	}
	return out, nil
}
