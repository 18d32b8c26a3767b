package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Secret keys, as in the Kubernetes Secret the StorageClass points at.
const (
	SecretUserID  = "userID"
	SecretUserKey = "userKey"
)

// Credentials authenticate one Ceph user. String() never shows the key.
type Credentials struct {
	ID  string
	Key string
}

func (c Credentials) String() string { return "ceph user " + c.ID }

// GoString keeps %#v from printing the key too.
func (c Credentials) GoString() string { return c.String() }

// ErrNoSecrets is wrapped by CredentialsFromSecrets when a key is missing.
var ErrNoSecrets = errors.New("missing secrets")

// CredentialsFromSecrets takes the CSI secrets of a request. Errors name the
// missing or bad field, never its value.
func CredentialsFromSecrets(secrets map[string]string) (Credentials, error) {
	id, key := secrets[SecretUserID], secrets[SecretUserKey]
	if id == "" || key == "" {
		return Credentials{}, fmt.Errorf("%w: the request needs secrets %q and %q (set the StorageClass secret parameters)", ErrNoSecrets, SecretUserID, SecretUserKey)
	}
	return validCredentials(Credentials{ID: id, Key: key})
}

func validCredentials(c Credentials) (Credentials, error) {
	c.ID = strings.TrimPrefix(c.ID, "client.")
	if len(c.ID) > 128 || strings.HasPrefix(c.ID, "-") || strings.ContainsAny(c.ID, " \t\r\n\x00=,") || c.ID == "" {
		return Credentials{}, fmt.Errorf("secret %q is not a valid Ceph user name", SecretUserID)
	}
	if len(c.Key) > 256 {
		return Credentials{}, fmt.Errorf("secret %q is too long to be a Ceph key", SecretUserKey)
	}
	for _, r := range c.Key {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '+' || r == '/' || r == '=') {
			return Credentials{}, fmt.Errorf("secret %q is not a base64 Ceph key", SecretUserKey)
		}
	}
	return c, nil
}

// CredentialsFromDir reads userID and userKey files, the layout of a
// Kubernetes Secret mounted as a volume. The controller uses them for the
// calls that carry no secrets (ListVolumes, GetCapacity, ControllerGetVolume).
func CredentialsFromDir(dir string) (Credentials, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("controller credentials: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	id, err := read(SecretUserID)
	if err != nil {
		return Credentials{}, err
	}
	key, err := read(SecretUserKey)
	if err != nil {
		return Credentials{}, err
	}
	return validCredentials(Credentials{ID: id, Key: key})
}
