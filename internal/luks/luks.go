// Package luks encrypts a volume's block device with LUKS2 through the
// cryptsetup tool: format, check, open, close and resize, and the list of
// the devices this driver has open.
//
// The key is a volume's data encryption key: random bytes with full
// entropy. It reaches cryptsetup as the keyslot passphrase on standard
// input (--key-file -), never in an argument, a file or an error.
package luks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rbdcsi/rbdcsi/internal/command"
)

// Prefix starts the dm name of every device this driver opens.
const Prefix = "rbdcsi-"

// tool is the program every call runs.
const tool = "cryptsetup"

// subsystem marks our headers (`cryptsetup luksDump`, blkid), so an
// operator can tell who formatted a device.
const subsystem = "rbdcsi"

// minKeyBytes: with full entropy, 32 bytes cannot be guessed, which is
// what lets Format use the cheapest PBKDF. A shorter key could be.
const minKeyBytes = 32

// DataOffset is where Format puts the encrypted data on the device: the
// LUKS2 header (two 16 KiB metadata copies and the keyslots area) comes
// before it. cryptsetup's default for LUKS2 is the same 16 MiB, aligned to
// RBD's 4 MiB objects; Format asks for it explicitly, so that the offset a
// byte of the user's device has in the image is fixed (the controller's
// changed-block tracking translates by it) whatever cryptsetup's defaults.
const DataOffset = 16 << 20

// What Format writes, which Header.Check holds every header to: the
// data's cipher and key, and the cheapest keyslot PBKDF (Format says why).
const (
	cipher        = "aes-xts-plain64"
	keyBytes      = 64 // XTS: two AES-256 keys
	kdf           = "pbkdf2"
	kdfHash       = "sha256"
	kdfIterations = 1000
)

// maxNameBytes is device-mapper's limit on a name (DM_NAME_LEN less its NUL).
const maxNameBytes = 127

// ErrWrongKey is an Open whose key opens no keyslot of the header.
var ErrWrongKey = errors.New("the key does not open this LUKS device")

// ErrBusy is a Close of a device that is still in use (mounted, open).
var ErrBusy = errors.New("the LUKS device is in use")

// Name is the dm-crypt device name of a volume: Prefix and the first 32
// hex digits of sha256(volumeID). A volume ID can be long and hold
// characters device-mapper and udev mangle; the hash is short, fixed and
// safe, and 128 bits do not collide between volumes.
func Name(volumeID string) string {
	sum := sha256.Sum256([]byte(volumeID))
	return Prefix + hex.EncodeToString(sum[:16])
}

// OpenOptions are the dm-crypt flags of an Open.
type OpenOptions struct {
	// ReadOnly opens the device read-only; it must match the backing
	// device's mode.
	ReadOnly bool
	// AllowDiscards passes discards (fstrim) through to the backing
	// device, which then shows which blocks are unused.
	AllowDiscards bool
	// Header opens with this copy of the header (Header.File) instead of
	// the one on the device: the copy that was checked is the one used,
	// whatever the device holds by then.
	Header string
}

// Mapping is one open device of ours.
type Mapping struct {
	Name    string // dm name, Prefix...
	Backing string // the device it sits on (/dev/rbd0), from `cryptsetup status`
}

// Options configure a LUKS.
type Options struct {
	// Runner runs cryptsetup; nil means command.ExecRunner{}.
	Runner command.InputRunner
	// MapperDir is where open devices appear; empty means /dev/mapper.
	// Tests point it elsewhere.
	MapperDir string
	// HeaderDir holds the header copies Header makes, for the length of a
	// stage (PrepareHeaderDir); empty means os.TempDir().
	HeaderDir string
}

// LUKS runs cryptsetup for the node.
type LUKS struct {
	run       command.InputRunner
	mapperDir string
	headerDir string
}

// New returns a LUKS.
func New(o Options) *LUKS {
	l := &LUKS{run: o.Runner, mapperDir: o.MapperDir, headerDir: o.HeaderDir}
	if l.run == nil {
		l.run = command.ExecRunner{}
	}
	if l.headerDir == "" {
		l.headerDir = os.TempDir()
	}
	if l.mapperDir == "" {
		l.mapperDir = "/dev/mapper"
	}
	return l
}

// Format writes a new LUKS2 header on device, with one keyslot for key.
//
// luksFormat --batch-mode overwrites whatever the device holds, without a
// question: callers must check first that the device is empty (no
// filesystem, no partition table, no other signature). Format itself only
// refuses a device that already holds a LUKS header of any version, the
// one mistake that would silently lose an encrypted volume's data.
//
// The keyslot uses PBKDF2 with the fewest iterations cryptsetup allows:
// a PBKDF slows down guessing a human's passphrase, and a full-entropy
// key cannot be guessed, while argon2id's default costs a second and up
// to 1 GiB of memory on every open of every volume.
func (l *LUKS) Format(ctx context.Context, device string, key []byte) error {
	if err := checkDevice(device); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	// Any LUKS version: isLuks without --type.
	_, err := l.run.Run(ctx, tool, "isLuks", device)
	switch {
	case err == nil:
		return fmt.Errorf("%s already holds a LUKS header: not formatting it again, which would destroy its data", device)
	case exitCode(err) != 1:
		return fmt.Errorf("checking %s for a LUKS header before formatting it: %w", device, err)
	}
	args := []string{"luksFormat", "--type", "luks2", "--batch-mode",
		"--cipher", cipher, "--key-size", strconv.Itoa(keyBytes * 8),
		"--pbkdf", kdf, "--pbkdf-force-iterations", strconv.Itoa(kdfIterations), "--hash", kdfHash,
		"--offset", strconv.Itoa(DataOffset / 512), "--subsystem", subsystem, "--key-file", "-", device}
	if _, err := l.run.RunInput(ctx, key, tool, args...); err != nil {
		return fmt.Errorf("formatting %s as LUKS2: %w", device, err)
	}
	return nil
}

// IsLUKS reports whether device holds a LUKS2 header. cryptsetup isLuks
// exits 1 both for "no header" and for some failures, so a device that
// is not there is an error here, found before asking it. A LUKS1 header
// is not LUKS2: false (and Format refuses it).
func (l *LUKS) IsLUKS(ctx context.Context, device string) (bool, error) {
	if err := checkDevice(device); err != nil {
		return false, err
	}
	if err := exists(device); err != nil {
		return false, err
	}
	_, err := l.run.Run(ctx, tool, "isLuks", "--type", "luks2", device)
	switch {
	case err == nil:
		return true, nil
	case exitCode(err) == 1:
		return false, nil
	}
	return false, fmt.Errorf("checking %s for a LUKS2 header: %w", device, err)
}

// Open opens device as the dm-crypt device name and returns its path
// (/dev/mapper/name). A name already open on device is returned as it is,
// so a retried stage does not fail; open on another device, or in the
// other read-only mode, it is an error. A key that opens no keyslot is
// ErrWrongKey.
func (l *LUKS) Open(ctx context.Context, device, name string, key []byte, o OpenOptions) (string, error) {
	if err := checkDevice(device); err != nil {
		return "", err
	}
	if err := checkName(name); err != nil {
		return "", err
	}
	if err := checkKey(key); err != nil {
		return "", err
	}
	path := filepath.Join(l.mapperDir, name)
	st, err := l.status(ctx, name)
	if err != nil {
		return "", err
	}
	if st.active {
		if !sameDevice(st.backing, device) {
			return "", fmt.Errorf("%s is already open on %s, not on %s", name, st.backing, device)
		}
		if st.mode != "" && st.readOnly() != o.ReadOnly {
			return "", fmt.Errorf("%s is already open on %s %s, not %s", name, device, st.mode, modeWord(o.ReadOnly))
		}
		return path, nil
	}
	args := []string{"open", "--type", "luks2", "--key-file", "-"}
	if o.ReadOnly {
		args = append(args, "--readonly")
	}
	if o.AllowDiscards {
		args = append(args, "--allow-discards")
	}
	if o.Header != "" {
		if err := checkDevice(o.Header); err != nil {
			return "", err
		}
		args = append(args, "--header", o.Header)
	}
	// --disable-keyring leaves the volume key in the dm table instead of
	// the kernel keyring, so `cryptsetup resize` needs no key later. Only
	// root can read the table, and root can read the plaintext device
	// anyway.
	args = append(args, "--disable-keyring", device, name)
	if _, err := l.run.RunInput(ctx, key, tool, args...); err != nil {
		if wrongKey(err) {
			return "", fmt.Errorf("opening %s as %s: %w: %w", device, name, ErrWrongKey, err)
		}
		return "", fmt.Errorf("opening %s as %s: %w", device, name, err)
	}
	return path, nil
}

// Close closes the dm-crypt device name. One that is not open is closed
// already; one in use is ErrBusy.
func (l *LUKS) Close(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	_, err := l.run.Run(ctx, tool, "close", name)
	switch {
	case err == nil, exitCode(err) == 4: // 4: "Device ... is not active."
		return nil
	case exitCode(err) == 5 || strings.Contains(stderr(err), "in use"):
		return fmt.Errorf("closing %s: %w: %w", name, ErrBusy, err)
	}
	return fmt.Errorf("closing %s: %w", name, err)
}

// Resize makes the open device name fill its backing device again, after
// the backing device grew. It needs no key (see Open's --disable-keyring).
func (l *LUKS) Resize(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if _, err := l.run.Run(ctx, tool, "resize", name); err != nil {
		if exitCode(err) == 4 {
			return fmt.Errorf("resizing %s: it is not open: %w", name, err)
		}
		return fmt.Errorf("resizing %s: %w", name, err)
	}
	return nil
}

// checkDevice refuses what cryptsetup could take for an option or a
// relative path.
func checkDevice(device string) error {
	if !filepath.IsAbs(device) {
		return fmt.Errorf("device %q is not an absolute path", device)
	}
	return nil
}

// exists says, as an error, that device is not there, before cryptsetup
// says something vaguer.
func exists(device string) error {
	if _, err := os.Stat(device); err != nil {
		return fmt.Errorf("device %s: %w", device, err)
	}
	return nil
}

// checkName keeps every name this package opens, closes or resizes to
// the driver's own: Prefix, then characters dm and udev keep as they are.
func checkName(name string) error {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok || rest == "" || len(name) > maxNameBytes {
		return fmt.Errorf("%q is not a device name of this driver (%s..., at most %d bytes)", name, Prefix, maxNameBytes)
	}
	for _, c := range rest {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%q is not a device name of this driver: only letters, digits, '-', '_' and '.' follow %s", name, Prefix)
		}
	}
	return nil
}

// checkKey refuses a key too short to be a volume key; the message gives
// its length only.
func checkKey(key []byte) error {
	if len(key) < minKeyBytes {
		return fmt.Errorf("a volume key has at least %d random bytes, not %d", minKeyBytes, len(key))
	}
	return nil
}

// exitCode is cryptsetup's exit status in err, -1 if it did not exit
// (not started, killed at the timeout). cryptsetup's codes: 1 wrong
// parameters or "no", 2 no permission (wrong passphrase), 3 out of
// memory, 4 wrong device (missing, not active), 5 busy or exists.
func exitCode(err error) int {
	// *exec.ExitError has ExitCode (from os.ProcessState), as do the
	// tests' fakes.
	var ec interface{ ExitCode() int }
	if err == nil || !errors.As(err, &ec) {
		return -1
	}
	return ec.ExitCode()
}

// stderr is the tool's message in err, "" if there is none.
func stderr(err error) string {
	var ce *command.Error
	if errors.As(err, &ce) {
		return ce.Stderr
	}
	return ""
}

// wrongKey recognises cryptsetup's "No key available with this
// passphrase." (exit 2).
func wrongKey(err error) bool {
	return exitCode(err) == 2 || strings.Contains(stderr(err), "No key available")
}
