package luks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
)

// A LUKS2 header's JSON area says how the data is encrypted (segments),
// which passphrase yields the volume key (keyslots, digests) and what
// cryptsetup must do besides (tokens, config flags and requirements). Its
// checksum is unkeyed: anyone who can write the image can write a header
// that cryptsetup accepts, for instance one whose keyslot or data segment
// uses cipher_null, which opens with any passphrase or stores the data in
// the clear. So the node opens only a header that is exactly what Format
// writes (Check), and binds the one it wrote to the volume's key
// (Digest, internal/node).

// ErrForeignHeader is a LUKS2 header, or the dm-crypt device opened from
// it, that is not what Format writes.
var ErrForeignHeader = errors.New("the LUKS2 header is not one this driver wrote")

// Header is a LUKS2 header's JSON metadata, as cryptsetup reads it, and
// the copy of the header it was read from (File), if any.
type Header struct {
	doc map[string]any // numbers kept as json.Number, as written
	dir string         // the copy's own directory; "" without a copy
}

// Header copies device's LUKS2 header (`cryptsetup luksHeaderBackup`: the
// JSON areas and the keyslots area) into a directory of its own under
// HeaderDir and reads the copy's metadata (`cryptsetup luksDump
// --dump-json-metadata`, cryptsetup 2.4 and later). It needs no key and no
// device-mapper. Opening with the copy (OpenOptions.Header) uses what was
// checked: a header swapped on the device between the check and the open
// is never used. The caller removes the copy (Remove).
func (l *LUKS) Header(ctx context.Context, device string) (Header, error) {
	if err := checkDevice(device); err != nil {
		return Header{}, err
	}
	dir, err := os.MkdirTemp(l.headerDir, headerCopyPrefix)
	if err != nil {
		return Header{}, fmt.Errorf("a directory for the LUKS2 header of %s: %w", device, err)
	}
	h := Header{dir: dir}
	if _, err := l.run.Run(ctx, tool, "luksHeaderBackup", device, "--header-backup-file", h.File()); err != nil {
		h.Remove()
		return Header{}, fmt.Errorf("copying the LUKS2 header of %s: %w", device, err)
	}
	out, err := l.run.Run(ctx, tool, "luksDump", "--dump-json-metadata", h.File())
	if err != nil {
		h.Remove()
		return Header{}, fmt.Errorf("reading the LUKS2 header of %s: %w", device, err)
	}
	if h.doc, err = parseDoc(out); err != nil {
		h.Remove()
		return Header{}, fmt.Errorf("the LUKS2 header of %s: %w", device, err)
	}
	return h, nil
}

// headerCopyPrefix names the directories of header copies.
const headerCopyPrefix = "header-"

// File is the header copy Header made ("" for a parsed header).
func (h Header) File() string {
	if h.dir == "" {
		return ""
	}
	return filepath.Join(h.dir, "header")
}

// Remove deletes the header copy, if there is one. A failure is logged
// by no one: PrepareHeaderDir removes what is left at the next start.
func (h Header) Remove() {
	if h.dir != "" {
		_ = os.RemoveAll(h.dir)
	}
}

// PrepareHeaderDir makes dir, private, for the header copies of a node
// plugin, and removes the copies a crash left there: at start no stage is
// under way.
func PrepareHeaderDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("header directory %q is not an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	left, err := filepath.Glob(filepath.Join(dir, headerCopyPrefix+"*"))
	if err != nil {
		return err
	}
	for _, d := range left {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	return nil
}

// ParseHeader reads the JSON cryptsetup dumps.
func ParseHeader(js []byte) (Header, error) {
	doc, err := parseDoc(js)
	return Header{doc: doc}, err
}

func parseDoc(js []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	var doc map[string]any
	if err := d.Decode(&doc); err != nil {
		return nil, fmt.Errorf("cryptsetup's JSON metadata: %w", err)
	}
	if doc == nil {
		return nil, errors.New("cryptsetup's JSON metadata is not a JSON object")
	}
	return doc, nil
}

// sections are the header's JSON objects (all of LUKS2's).
var sections = []string{"config", "digests", "keyslots", "segments", "tokens"}

// Digest is SHA-256 over the header's sections in a canonical form
// (encoding/json: object keys sorted, numbers as written, no spaces).
// Every volume's header differs (salts, digests), and any change to how
// its data is encrypted or its key unlocked changes the digest.
func (h Header) Digest() [32]byte {
	canon := map[string]any{}
	for _, s := range sections {
		canon[s] = h.doc[s]
	}
	b, err := json.Marshal(canon)
	if err != nil {
		// Only decoded JSON is in doc, which always marshals.
		panic(fmt.Sprintf("luks: marshalling a decoded header: %v", err))
	}
	return sha256.Sum256(b)
}

// Check holds the header to exactly what Format writes: one data segment
// of aes-xts-plain64 at DataOffset without integrity, one PBKDF2 keyslot
// whose area is encrypted with aes-xts-plain64, one digest binding the
// two, no token, no flag, no requirement. The error (ErrForeignHeader)
// names the first thing found otherwise; a header holds no secret, and
// the salts and digests are never quoted.
func (h Header) Check() error {
	for _, check := range []func(map[string]any) error{checkTop, checkSegment, checkKeyslot, checkDigest, checkTokens, checkConfig} {
		if err := check(h.doc); err != nil {
			return fmt.Errorf("%w: %v", ErrForeignHeader, err)
		}
	}
	return nil
}

func checkTop(doc map[string]any) error {
	return onlyKeys(doc, "the header", sections...)
}

// sectorSizes are the encryption sector sizes Format can leave: it names
// none, and cryptsetup then takes the data device's physical block size
// when that is a power of two from 512 to 4096 bytes (and the offset and
// size are multiples of it), else 512. Which one depends on the mapper's
// device; none of them weakens the encryption.
var sectorSizes = []string{"512", "1024", "2048", "4096"}

// checkSegment: where the data is and how it is encrypted.
func checkSegment(doc map[string]any) error {
	seg, err := onlyEntry(doc, "segments", "segment")
	if err != nil {
		return err
	}
	const what = "segment 0"
	for _, c := range []struct {
		key  string
		want any
	}{
		{"encryption", cipher}, {"type", "crypt"}, {"offset", strconv.Itoa(DataOffset)}, {"size", "dynamic"}, {"iv_tweak", "0"},
	} {
		if err := is(seg, what, c.key, c.want); err != nil {
			return err
		}
	}
	if n, ok := seg["sector_size"].(json.Number); !ok || !slices.Contains(sectorSizes, n.String()) {
		return fmt.Errorf("%s sector_size is %s, not one of %v", what, show(seg["sector_size"]), sectorSizes)
	}
	return onlyKeys(seg, what, "type", "offset", "size", "iv_tweak", "encryption", "sector_size")
}

// checkKeyslot: how the passphrase (the DEK) yields the volume key. A
// keyslot area encrypted with cipher_null opens with any passphrase.
func checkKeyslot(doc map[string]any) error {
	ks, err := onlyEntry(doc, "keyslots", "keyslot")
	if err != nil {
		return err
	}
	const what = "keyslot 0"
	area, err := object(ks, what, "area")
	if err != nil {
		return err
	}
	for _, c := range []struct {
		key  string
		want any
	}{{"encryption", cipher}, {"type", "raw"}, {"key_size", keyBytes}} {
		if err := is(area, what+" area", c.key, c.want); err != nil {
			return err
		}
	}
	if err := onlyKeys(area, what+" area", "type", "offset", "size", "encryption", "key_size"); err != nil {
		return err
	}
	kdfObj, err := object(ks, what, "kdf")
	if err != nil {
		return err
	}
	for _, c := range []struct {
		key  string
		want any
	}{{"type", kdf}, {"hash", kdfHash}, {"iterations", kdfIterations}} {
		if err := is(kdfObj, what+" kdf", c.key, c.want); err != nil {
			return err
		}
	}
	if err := onlyKeys(kdfObj, what+" kdf", "type", "hash", "iterations", "salt"); err != nil {
		return err
	}
	af, err := object(ks, what, "af")
	if err != nil {
		return err
	}
	// 4000 stripes is the only anti-forensic split LUKS2 knows.
	for _, c := range []struct {
		key  string
		want any
	}{{"type", "luks1"}, {"stripes", 4000}, {"hash", kdfHash}} {
		if err := is(af, what+" af", c.key, c.want); err != nil {
			return err
		}
	}
	if err := onlyKeys(af, what+" af", "type", "stripes", "hash"); err != nil {
		return err
	}
	for _, c := range []struct {
		key  string
		want any
	}{{"type", "luks2"}, {"key_size", keyBytes}} {
		if err := is(ks, what, c.key, c.want); err != nil {
			return err
		}
	}
	// No "priority" either: Format leaves the default.
	return onlyKeys(ks, what, "type", "key_size", "af", "area", "kdf")
}

// checkDigest: the one digest that says keyslot 0 yields segment 0's key.
func checkDigest(doc map[string]any) error {
	dg, err := onlyEntry(doc, "digests", "digest")
	if err != nil {
		return err
	}
	const what = "digest 0"
	// cryptsetup gives the digest the least PBKDF2 iterations when
	// Format forces the keyslot's (--pbkdf-force-iterations).
	for _, c := range []struct {
		key  string
		want any
	}{{"type", kdf}, {"hash", kdfHash}, {"iterations", kdfIterations}} {
		if err := is(dg, what, c.key, c.want); err != nil {
			return err
		}
	}
	for _, key := range []string{"keyslots", "segments"} {
		if l, ok := dg[key].([]any); !ok || len(l) != 1 || l[0] != "0" {
			return fmt.Errorf("%s %s is %s, not [\"0\"]", what, key, show(dg[key]))
		}
	}
	return onlyKeys(dg, what, "type", "keyslots", "segments", "hash", "iterations", "salt", "digest")
}

// checkTokens: Format adds none, and a token can make cryptsetup run a
// plugin or unlock without the passphrase.
func checkTokens(doc map[string]any) error {
	tokens, err := object(doc, "the header", "tokens")
	if err != nil {
		return err
	}
	for _, id := range slices.Sorted(maps.Keys(tokens)) {
		typ := "?"
		if t, ok := tokens[id].(map[string]any); ok {
			typ = show(t["type"])
		}
		return fmt.Errorf("the header has token %.20q of type %s; this driver adds no tokens", id, typ)
	}
	return nil
}

// checkConfig: the areas' sizes, and nothing else; persistent flags would
// change how the device opens (allow-discards, for one), requirements
// what cryptsetup does with it (a reencryption in progress).
func checkConfig(doc map[string]any) error {
	cfg, err := object(doc, "the header", "config")
	if err != nil {
		return err
	}
	for _, key := range []string{"json_size", "keyslots_size"} {
		if s, ok := cfg[key].(string); !ok || notSize(s) {
			return fmt.Errorf("config %s is %s, not a size", key, show(cfg[key]))
		}
	}
	return onlyKeys(cfg, "config", "json_size", "keyslots_size")
}

// notSize reports a size string that is not a decimal number.
func notSize(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err != nil
}

// onlyEntry is section's one entry, "0", as an object (what: for messages).
func onlyEntry(doc map[string]any, section, what string) (map[string]any, error) {
	m, err := object(doc, "the header", section)
	if err != nil {
		return nil, err
	}
	ids := slices.Sorted(maps.Keys(m))
	if len(ids) != 1 || ids[0] != "0" {
		return nil, fmt.Errorf("the header has %d %s (%s), not one, %s 0", len(ids), section, idList(ids), what)
	}
	return object(m, what+"s", "0")
}

// object is o[key] as a JSON object.
func object(o map[string]any, what, key string) (map[string]any, error) {
	m, ok := o[key].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s %s is %s, not an object", what, key, show(o[key]))
	}
	return m, nil
}

// is checks o[key] against a string or an int.
func is(o map[string]any, what, key string, want any) error {
	got := o[key]
	ok := false
	switch w := want.(type) {
	case string:
		ok = got == w
	case int:
		n, isNum := got.(json.Number)
		ok = isNum && n.String() == strconv.Itoa(w)
	}
	if !ok {
		return fmt.Errorf("%s %s is %s, not %s", what, key, show(got), show(want))
	}
	return nil
}

// onlyKeys refuses keys of o other than allowed; the ones it lists must
// be there.
func onlyKeys(o map[string]any, what string, allowed ...string) error {
	for _, k := range allowed {
		if _, ok := o[k]; !ok {
			return fmt.Errorf("%s has no %s", what, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(o)) {
		if !slices.Contains(allowed, k) {
			return fmt.Errorf("%s has %.40q, which this driver never writes", what, k)
		}
	}
	return nil
}

// show is a JSON value for a message: strings quoted and cut short,
// numbers as written, containers by kind only.
func show(v any) string {
	switch v := v.(type) {
	case nil:
		return "missing"
	case string:
		return fmt.Sprintf("%.40q", v)
	case json.Number:
		return fmt.Sprintf("%.20s", v.String())
	case int:
		return strconv.Itoa(v)
	case bool:
		return strconv.FormatBool(v)
	case []any:
		return fmt.Sprintf("a list of %d", len(v))
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// idList names at most four IDs, each cut short.
func idList(ids []string) string {
	var b bytes.Buffer
	for i, id := range ids {
		if i == 4 {
			b.WriteString(", ...")
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%.20q", id)
	}
	return b.String()
}
