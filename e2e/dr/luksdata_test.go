package dr

import (
	"crypto/aes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	librbd "github.com/ceph/go-ceph/rbd"

	"github.com/rbdcsi/rbdcsi/e2e/harness"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/luks"
)

// hasDM reports whether the kernel has device-mapper (dm_mod).
func hasDM() bool {
	b, err := os.ReadFile("/proc/misc")
	return err == nil && regexp.MustCompile(`(?m)\sdevice-mapper$`).Match(b)
}

// withImage runs use with the site's copy open as admin (read-only unless
// write), and closes it after.
func (s *site) withImage(t *testing.T, image string, write bool, use func(*librbd.Image)) {
	t.Helper()
	ioctx, done := s.c.AdminIoctx(t)
	defer done()
	open := librbd.OpenImageReadOnly
	if write {
		open = librbd.OpenImage
	}
	img, err := open(ioctx, image, librbd.NoSnapshot)
	harness.Must(t, err, "opening %s on site %s", image, s.name)
	defer img.Close()
	use(img)
}

// keyRecord is the encrypted volume's key record in the site's copy.
func (s *site) keyRecord(t *testing.T, image string) kms.VolumeKey {
	t.Helper()
	var md map[string]string
	s.withImage(t, image, false, func(img *librbd.Image) {
		var err error
		md, err = img.ListMetadata()
		harness.Must(t, err, "metadata of %s on site %s", image, s.name)
	})
	rec, ok, err := kms.ReadVolumeKey(md)
	if !ok || err != nil {
		t.Fatalf("site %s: %s carries no whole key record (%v): %v", s.name, image, err, md)
	}
	return rec
}

func (s *site) setMetadata(t *testing.T, image string, kv map[string]string) {
	t.Helper()
	for k, v := range kv {
		out, err := s.c.RBD("image-meta", "set", s.c.Pool+"/"+image, k, v)
		harness.Must(t, err, "image-meta set %s on site %s: %s", k, s.name, out)
	}
}

// unwrap is the DEK of the site's copy, unwrapped with the KEK in secrets
// for the image the copy is (its pool and name).
func (s *site) unwrap(t *testing.T, image string, secrets map[string]string) []byte {
	t.Helper()
	rec := s.keyRecord(t, image)
	kek, err := base64.StdEncoding.DecodeString(secrets["encryptionKEK."+rec.DEK.KEKID()])
	harness.Must(t, err, "KEK")
	dek, err := kms.Unwrap(rec.DEK, kek, kms.Binding{KMSID: rec.KMSID, Pool: s.c.Pool, Image: image})
	harness.Must(t, err, "unwrapping the DEK of %s on site %s", image, s.name)
	return dek
}

// readRaw reads n bytes of the site's copy at off, as admin.
func (s *site) readRaw(t *testing.T, image string, off int64, n int) []byte {
	t.Helper()
	buf := make([]byte, n)
	s.withImage(t, image, false, func(img *librbd.Image) {
		got, err := img.ReadAt(buf, off)
		harness.Must(t, err, "reading %s on site %s", image, s.name)
		buf = buf[:got]
	})
	return buf
}

func (s *site) writeRaw(t *testing.T, image string, off int64, data []byte) {
	t.Helper()
	s.withImage(t, image, true, func(img *librbd.Image) {
		_, err := img.WriteAt(data, off)
		harness.Must(t, err, "writing %s on site %s", image, s.name)
		harness.Must(t, img.Flush(), "flushing %s", image)
	})
}

// luksHeader copies the LUKS2 header area of the site's copy to a file
// and reads it as the node does (luks.Header: luksHeaderBackup, the JSON
// metadata); the file stays for cryptsetup's look at the keyslot.
func (s *site) luksHeader(t *testing.T, image string) luks.Header {
	t.Helper()
	file := s.headerFile(t, image)
	h, err := luks.New(luks.Options{HeaderDir: t.TempDir()}).Header(ctx(t), file)
	harness.Must(t, err, "the LUKS2 header of %s on site %s", image, s.name)
	t.Cleanup(h.Remove)
	harness.Must(t, h.Check(), "the LUKS2 header of %s on site %s", image, s.name)
	return h
}

func (s *site) headerFile(t *testing.T, image string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "header")
	harness.Must(t, os.WriteFile(file, s.readRaw(t, image, 0, luks.DataOffset), 0o600), "header copy")
	return file
}

// segment is where a LUKS2 header puts the data, and how it is
// enciphered.
type segment struct {
	key        []byte // the volume key: aes-xts-plain64's two AES-256 keys
	offset     int64  // of the data on the device
	sectorSize int
}

// cipherOf reads the data segment of the copy's LUKS2 header and its
// volume key, which the DEK (the keyslot's passphrase) opens
// (`cryptsetup luksDump --dump-volume-key`, no device-mapper).
func (s *site) cipherOf(t *testing.T, image string, dek []byte) segment {
	t.Helper()
	file := s.headerFile(t, image)
	js, err := exec.Command("cryptsetup", "luksDump", "--dump-json-metadata", file).Output()
	harness.Must(t, err, "luksDump --dump-json-metadata")
	var doc struct {
		Segments map[string]struct {
			Offset     string `json:"offset"`
			Encryption string `json:"encryption"`
			SectorSize int    `json:"sector_size"`
			IVTweak    string `json:"iv_tweak"`
		} `json:"segments"`
	}
	harness.Must(t, json.Unmarshal(js, &doc), "parsing the header's JSON")
	seg, ok := doc.Segments["0"]
	if !ok || len(doc.Segments) != 1 || seg.Encryption != "aes-xts-plain64" || seg.IVTweak != "0" {
		t.Fatalf("site %s: the header's segments %+v: want one aes-xts-plain64 segment", s.name, doc.Segments)
	}
	off, err := strconv.ParseInt(seg.Offset, 10, 64)
	harness.Must(t, err, "segment offset")
	keyFile := filepath.Join(t.TempDir(), "dek")
	harness.Must(t, os.WriteFile(keyFile, dek, 0o600), "DEK file")
	out, err := exec.Command("cryptsetup", "luksDump", "--batch-mode", "--dump-volume-key", "--key-file", keyFile, file).CombinedOutput()
	harness.Must(t, err, "luksDump --dump-volume-key: %s", out)
	m := regexp.MustCompile(`(?:MK dump|Volume key):((?:\s+[0-9a-f]{2})+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("luksDump shows no volume key:\n%s", out)
	}
	key, err := hex.DecodeString(strings.Join(strings.Fields(string(m[1])), ""))
	harness.Must(t, err, "volume key")
	if len(key) != 64 {
		t.Fatalf("a volume key of %d bytes, want aes-xts' 64", len(key))
	}
	return segment{key: key, offset: off, sectorSize: seg.SectorSize}
}

// xts enciphers (or deciphers) one sector of the data segment with
// AES-256-XTS, as dm-crypt's aes-xts-plain64 does: the tweak is the
// sector's number in 512-byte units from the segment's start, little
// endian (LUKS2 sets no iv_large_sectors), enciphered under the key's
// second half; each 16-byte block is masked with the tweak times alpha^j
// in GF(2^128) (IEEE 1619).
func (g segment) xts(t *testing.T, sector int, data []byte, decrypt bool) []byte {
	t.Helper()
	k1, err1 := aes.NewCipher(g.key[:32])
	k2, err2 := aes.NewCipher(g.key[32:])
	harness.Must(t, errors.Join(err1, err2), "AES keys")
	var tweak [16]byte
	binary.LittleEndian.PutUint64(tweak[:], uint64(sector*g.sectorSize/512))
	k2.Encrypt(tweak[:], tweak[:])
	out := make([]byte, len(data))
	for off := 0; off < len(data); off += 16 {
		var b [16]byte
		subtle.XORBytes(b[:], data[off:off+16], tweak[:])
		if decrypt {
			k1.Decrypt(b[:], b[:])
		} else {
			k1.Encrypt(b[:], b[:])
		}
		subtle.XORBytes(out[off:off+16], b[:], tweak[:])
		carry := tweak[15] >> 7
		for i := 15; i > 0; i-- {
			tweak[i] = tweak[i]<<1 | tweak[i-1]>>7
		}
		tweak[0] <<= 1
		if carry != 0 {
			tweak[0] ^= 0x87
		}
	}
	return out
}

// writeEncrypted writes data at the start of the volume's plaintext, as a
// write through its dm-crypt device does.
func (s *site) writeEncrypted(t *testing.T, image string, dek, data []byte) {
	t.Helper()
	g := s.cipherOf(t, image, dek)
	var enc []byte
	for i := 0; i*g.sectorSize < len(data); i++ {
		enc = append(enc, g.xts(t, i, data[i*g.sectorSize:(i+1)*g.sectorSize], false)...)
	}
	s.writeRaw(t, image, g.offset, enc)
}

// readEncrypted reads n bytes from the start of the volume's plaintext.
func (s *site) readEncrypted(t *testing.T, image string, dek []byte, n int) []byte {
	t.Helper()
	g := s.cipherOf(t, image, dek)
	raw := s.readRaw(t, image, g.offset, n)
	var plain []byte
	for i := 0; i*g.sectorSize < len(raw); i++ {
		plain = append(plain, g.xts(t, i, raw[i*g.sectorSize:(i+1)*g.sectorSize], true)...)
	}
	return plain
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
