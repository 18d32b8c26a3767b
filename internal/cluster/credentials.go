package cluster

import (
	"encoding/base64"
	"encoding/binary"
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

// CallCredentials picks the Ceph user a call acts as: the one its secrets
// name, else the plugin's own (own, from the mounted Secret that ownFlag
// names; nil: none). Secrets without userID and userKey are a call without
// a Ceph user: a StorageClass names only a tenant's KEK Secret, or none,
// and the plugins use their own users.
func CallCredentials(secrets map[string]string, own *Credentials, ownFlag string) (Credentials, error) {
	if secrets[SecretUserID] != "" || secrets[SecretUserKey] != "" {
		return CredentialsFromSecrets(secrets)
	}
	if own == nil {
		return Credentials{}, fmt.Errorf("%w: the request carries no %q and %q, and this plugin has no Ceph user of its own (%s)", ErrNoSecrets, SecretUserID, SecretUserKey, ownFlag)
	}
	return *own, nil
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
// Kubernetes Secret mounted as a volume: a plugin's own Ceph user, for the
// calls that carry none (CallCredentials).
func CredentialsFromDir(dir string) (Credentials, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("Ceph credentials: %w", err)
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

// Cephx key types, by the number a key's encoding starts with.
const (
	KeyTypeAES     = "AES"
	KeyTypeAES256K = "AES256K"
)

// KeyType names the cephx key type of c.Key: a key is base64 of a
// little-endian 16-bit type (1 AES, 2 AES256K), its creation time, a
// length and the secret. "" when the key does not decode.
func (c Credentials) KeyType() string {
	raw, err := base64.StdEncoding.DecodeString(c.Key)
	if err != nil || len(raw) < 2 {
		return ""
	}
	switch binary.LittleEndian.Uint16(raw) {
	case 1:
		return KeyTypeAES
	case 2:
		return KeyTypeAES256K
	default:
		return fmt.Sprintf("type %d", binary.LittleEndian.Uint16(raw))
	}
}

// AES256KHint says why an AES256K key cannot serve a Ceph client older
// than Squid 19.2.6 or Tentacle 20.2.4, or Linux's krbd before 7.0, and
// what an admin can do (docs/operations.md#aes256k-keys).
func (c Credentials) AES256KHint() string {
	return fmt.Sprintf("%s has an AES256K key, which Ceph clients before 19.2.6/20.2.4 and the kernel RBD client before Linux 7.0 cannot use: "+
		"give the user an AES key (`ceph auth rotate client.%s --key_type aes`, after allowing AES keys with "+
		"`ceph mon set auth_allowed_ciphers aes,aes256k` and `ceph config set mon mon_auth_allow_insecure_key true`) "+
		"and put it in the Secret, or run the plugin image built on forky with a mapper other than krbd", c, c.ID)
}

// UnusableKey explains a failure to connect or map with an AES256K key:
// clients that cannot read or use one fail with EINVAL ("Invalid argument",
// "Malformed input"). It returns err unchanged when the key is of another
// type or the failure is another one, and otherwise err with AES256KHint.
func (c Credentials) UnusableKey(err error) error {
	if err == nil || c.KeyType() != KeyTypeAES256K {
		return err
	}
	if msg := err.Error(); !strings.Contains(msg, "Invalid argument") && !strings.Contains(msg, "Malformed input") {
		return err
	}
	return fmt.Errorf("%w (%s)", err, c.AES256KHint())
}
