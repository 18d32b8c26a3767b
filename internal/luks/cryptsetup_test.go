package luks

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/command"
)

// TestCryptsetupFormatsAFile runs the real cryptsetup on regular files:
// luksFormat, isLuks and luksDump need no device-mapper (opening does;
// e2e/node does that in a kernel VM).
func TestCryptsetupFormatsAFile(t *testing.T) {
	if _, err := exec.LookPath(tool); err != nil {
		t.Skip("cryptsetup is not installed (make deps installs cryptsetup-bin)")
	}
	ctx := context.Background()
	dir := t.TempDir()
	l := New(Options{Runner: command.ExecRunner{}, MapperDir: filepath.Join(dir, "mapper")})
	dev, zeros := filepath.Join(dir, "volume"), filepath.Join(dir, "zeros")
	for _, p := range []string{dev, zeros} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, 32<<20); err != nil {
			t.Fatal(err)
		}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	// Bytes a line-based reader would cut at must reach cryptsetup too.
	key[3], key[17] = '\n', 0

	if err := l.Format(ctx, dev, key); err != nil {
		t.Fatal(err)
	}
	if ok, err := l.IsLUKS(ctx, dev); !ok || err != nil {
		t.Fatalf("IsLUKS(formatted) = %v, %v", ok, err)
	}
	if ok, err := l.IsLUKS(ctx, zeros); ok || err != nil {
		t.Fatalf("IsLUKS(zeros) = %v, %v", ok, err)
	}
	if ok, err := l.IsLUKS(ctx, filepath.Join(dir, "missing")); ok || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("IsLUKS(missing) = %v, %v", ok, err)
	}

	dump, err := exec.Command(tool, "luksDump", dev).Output()
	if err != nil {
		t.Fatalf("luksDump: %v", err)
	}
	for _, re := range []string{
		`(?m)^Version:\s+2$`, `(?m)^Subsystem:\s+rbdcsi$`, `(?m)^\s+cipher:\s+aes-xts-plain64$`,
		`(?m)^\s+Key:\s+512 bits$`, `(?m)^\s+PBKDF:\s+pbkdf2$`, `(?m)^\s+Hash:\s+sha256$`, `(?m)^\s+Iterations:\s+1000$`,
		// The user's data starts at DataOffset, as changed-block tracking reckons.
		`(?m)^\s+offset:\s+16777216 \[bytes\]$`,
	} {
		if !regexp.MustCompile(re).Match(dump) {
			t.Errorf("luksDump does not match %s:\n%s", re, dump)
		}
	}
	if n := strings.Count(string(dump), ": luks2\n"); n != 1 {
		t.Errorf("%d keyslots, want 1:\n%s", n, dump)
	}

	// The keyslot opens with exactly the key on stdin, and cryptsetup's
	// answer to another key is what Open calls ErrWrongKey.
	test := []string{"open", "--test-passphrase", "--type", "luks2", "--key-file", "-", dev}
	if _, err := l.run.RunInput(ctx, key, tool, test...); err != nil {
		t.Fatalf("the key does not open the keyslot: %v", err)
	}
	other := append([]byte(nil), key...)
	other[31] ^= 1
	if _, err := l.run.RunInput(ctx, other, tool, test...); !wrongKey(err) {
		t.Fatalf("another key: %v, not recognised as a wrong key", err)
	}
	if _, err := l.run.RunInput(ctx, key[:31], tool, test...); !wrongKey(err) {
		t.Fatalf("the key less its last byte: %v, not recognised as a wrong key", err)
	}

	// A second Format must not replace the header (and the data's key).
	uuid, _ := exec.Command(tool, "luksUUID", dev).Output()
	if err := l.Format(ctx, dev, key); err == nil || !strings.Contains(err.Error(), "already holds a LUKS header") {
		t.Fatalf("Format of a LUKS device = %v", err)
	}
	if again, _ := exec.Command(tool, "luksUUID", dev).Output(); len(uuid) == 0 || string(again) != string(uuid) {
		t.Fatalf("the header changed: UUID %q, then %q", uuid, again)
	}
}
