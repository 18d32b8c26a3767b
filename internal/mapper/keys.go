package mapper

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// redact replaces the secret in an error message. Ceph tools echo a key
// they cannot parse ("error setting modifier ... val=<key>"), so any
// output that may have seen one goes through here.
func redact(err error, secret string) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return &redacted{msg: strings.ReplaceAll(err.Error(), secret, "<redacted>"), err: err}
}

// redacted keeps errors.Is working on the original chain while printing
// only the cleaned message.
type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Is(target error) bool {
	return errors.Is(r.err, target)
}

// KeyDir holds the short-lived key files. It is private (0700) and, since
// a crash can leave a file behind, swept at start.
type KeyDir string

// PrepareKeyDir creates dir (0700) and removes any key file an earlier run
// left there.
func PrepareKeyDir(dir string) (KeyDir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", err
	}
	old, _ := filepath.Glob(filepath.Join(dir, "key-*"))
	for _, f := range old {
		_ = os.Remove(f)
	}
	return KeyDir(dir), nil
}

// write stores content in a new 0600 file and returns its path and a
// function that removes it.
func (d KeyDir) write(content string) (string, func(), error) {
	if d == "" {
		return "", nil, errors.New("no key directory configured")
	}
	f, err := os.CreateTemp(string(d), "key-*") // CreateTemp makes it 0600
	if err != nil {
		return "", nil, fmt.Errorf("writing key file: %w", err)
	}
	remove := func() { _ = os.Remove(f.Name()) }
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		remove()
		return "", nil, fmt.Errorf("writing key file: %w", err)
	}
	if err := f.Close(); err != nil {
		remove()
		return "", nil, fmt.Errorf("writing key file: %w", err)
	}
	return f.Name(), remove, nil
}

// keyring is the keyring file format, for tools that take --keyring.
func keyring(id, key string) string {
	return fmt.Sprintf("[client.%s]\n\tkey = %s\n", id, key)
}

// Filesystem magic numbers (statfs f_type) of memory-backed filesystems:
// tmpfs (what an emptyDir with medium Memory is) and ramfs.
const (
	tmpfsMagic = 0x01021994
	ramfsMagic = 0x858458f6
)

// CheckKeyDirInMemory refuses a key directory that is not on a
// memory-backed filesystem: a key file lives only for a call, but a crash
// or a page written back in between would leave a Ceph key on a disk.
func CheckKeyDirInMemory(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("key directory %s: %w", dir, err)
	}
	if t := uint32(st.Type); t != tmpfsMagic && t != ramfsMagic {
		return fmt.Errorf("key directory %s is on a filesystem of type %#x, not in memory (tmpfs): key files could reach a disk; mount a tmpfs there (the shipped DaemonSet mounts an emptyDir with medium Memory)", dir, t)
	}
	return nil
}
