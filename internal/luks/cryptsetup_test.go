package luks

import (
	"bytes"
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
	"github.com/rbdcsi/rbdcsi/internal/luks/lukstest"
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
	l := New(Options{Runner: command.ExecRunner{}, MapperDir: filepath.Join(dir, "mapper"), HeaderDir: dir})
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
	// The header Format writes is the one Check holds every header to.
	h, err := l.Header(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Check(); err != nil {
		t.Fatalf("the header Format wrote: %v", err)
	}
	again, err := l.Header(ctx, dev)
	if err != nil || again.Digest() != h.Digest() {
		t.Fatalf("a second read of the header: %v, or another digest", err)
	}
	again.Remove()
	// The copy the open would use is the device's header, byte for byte,
	// and stays so whatever the device holds afterwards.
	copied, err := os.ReadFile(h.File())
	if err != nil {
		t.Fatal(err)
	}
	device, err := os.ReadFile(dev)
	if err != nil {
		t.Fatal(err)
	}
	if len(copied) == 0 || len(copied) > DataOffset || !bytes.Equal(copied, device[:len(copied)]) {
		t.Fatalf("the header copy (%d bytes) is not the start of the device", len(copied))
	}
	if err := os.WriteFile(dev, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if after, err := os.ReadFile(h.File()); err != nil || !bytes.Equal(after, copied) {
		t.Fatalf("the copy changed with the device: %v", err)
	}
	h.Remove()
	if _, err := os.Stat(h.File()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Remove left the copy: %v", err)
	}
	if err := os.WriteFile(dev, device, 0o600); err != nil {
		t.Fatal(err)
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

// TestCryptsetupPlantedHeadersFailTheCheck plants headers on files as
// someone who can write a volume's image but holds no key can, and checks
// that real cryptsetup reads them as they are and Check refuses them,
// naming the cipher.
func TestCryptsetupPlantedHeadersFailTheCheck(t *testing.T) {
	if _, err := exec.LookPath(tool); err != nil {
		t.Skip("cryptsetup is not installed (make deps installs cryptsetup-bin)")
	}
	ctx := context.Background()
	dir := t.TempDir()
	l := New(Options{Runner: command.ExecRunner{}, HeaderDir: t.TempDir()})
	newFile := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, 32<<20); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	ours := newFile("ours")
	if err := l.Format(ctx, ours, key); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(ours)
	if err != nil {
		t.Fatal(err)
	}
	expectRefused := func(t *testing.T, device, says string) {
		t.Helper()
		h, err := l.Header(ctx, device)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Remove()
		if err := h.Check(); !errors.Is(err, ErrForeignHeader) || !strings.Contains(err.Error(), says) {
			t.Fatalf("Check of the planted header = %v, want ErrForeignHeader saying %s", err, says)
		}
	}

	// cryptsetup itself will not make a LUKS2 keyslot with cipher_null
	// (--keyslot-cipher cipher_null-ecb fails): the attacker writes the
	// JSON, whose checksum is unkeyed. Such a keyslot opens with any
	// passphrase. Likewise a segment switched to cipher_null after the
	// format stores new writes in the clear.
	for name, c := range map[string]struct {
		edit func(doc map[string]any)
		says string
	}{
		"keyslot area": {func(d map[string]any) {
			d["keyslots"].(map[string]any)["0"].(map[string]any)["area"].(map[string]any)["encryption"] = "cipher_null-ecb"
		}, `keyslot 0 area encryption is "cipher_null-ecb"`},
		"segment": {func(d map[string]any) {
			d["segments"].(map[string]any)["0"].(map[string]any)["encryption"] = "cipher_null-ecb"
		}, `segment 0 encryption is "cipher_null-ecb"`},
	} {
		t.Run(name, func(t *testing.T) {
			dev := filepath.Join(dir, "planted-"+name)
			if err := os.WriteFile(dev, orig, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := lukstest.RewriteJSON(dev, c.edit); err != nil {
				t.Fatal(err)
			}
			expectRefused(t, dev, c.says)
		})
	}

	// A whole header of cryptsetup's own making with a null data cipher.
	// cryptsetup tries the cipher through device-mapper, which a build
	// machine or container may not have.
	t.Run("luksFormat --cipher cipher_null-ecb", func(t *testing.T) {
		dev := newFile("null")
		format := exec.Command(tool, "luksFormat", "--type", "luks2", "--batch-mode", "--cipher", "cipher_null-ecb",
			"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", "-", dev)
		format.Stdin = strings.NewReader("any passphrase")
		if out, err := format.CombinedOutput(); err != nil {
			t.Skipf("cryptsetup cannot make a cipher_null header here (no device-mapper?): %v: %s", err, out)
		}
		expectRefused(t, dev, `"cipher_null-ecb"`)
	})
}
