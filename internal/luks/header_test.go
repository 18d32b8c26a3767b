package luks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// testdata/formatted.json is `cryptsetup luksDump --dump-json-metadata` of
// a 32 MiB file formatted with Format's arguments (cryptsetup 2.6.1).
// Beside it, from the same cryptsetup: second-keyslot.json (luksAddKey),
// token.json (token add --key-description), offset.json (luksFormat with
// --offset 65536 on a 64 MiB file); and formatted.json edited by hand:
// segment-cipher-null.json, keyslot-cipher-null.json, integrity.json.

func readHeader(t *testing.T, name string) Header {
	t.Helper()
	js, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	h, err := ParseHeader(js)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return h
}

// edited is formatted.json changed by edit.
func edited(t *testing.T, edit func(doc map[string]any)) Header {
	t.Helper()
	h := readHeader(t, "formatted.json")
	edit(h.doc)
	return h
}

func obj(v any) map[string]any { return v.(map[string]any) }

func segment0(doc map[string]any) map[string]any { return obj(obj(doc["segments"])["0"]) }
func keyslot0(doc map[string]any) map[string]any { return obj(obj(doc["keyslots"])["0"]) }
func digest0(doc map[string]any) map[string]any  { return obj(obj(doc["digests"])["0"]) }

func TestCheckHeaderPassesWhatFormatWrites(t *testing.T) {
	if err := readHeader(t, "formatted.json").Check(); err != nil {
		t.Fatal(err)
	}
	// Any sector size cryptsetup may pick for Format's device.
	for _, size := range []string{"512", "1024", "2048", "4096"} {
		h := edited(t, func(d map[string]any) { segment0(d)["sector_size"] = json.Number(size) })
		if err := h.Check(); err != nil {
			t.Errorf("sector size %s: %v", size, err)
		}
	}
}

func TestCheckHeaderRefusesWhatFormatNeverWrites(t *testing.T) {
	files := map[string]string{
		"segment-cipher-null.json": `segment 0 encryption is "cipher_null-ecb", not "aes-xts-plain64"`,
		"keyslot-cipher-null.json": `keyslot 0 area encryption is "cipher_null-ecb", not "aes-xts-plain64"`,
		"integrity.json":           `segment 0 encryption is "aes-xts-random"`,
		"second-keyslot.json":      `the header has 2 keyslots ("0", "1"), not one, keyslot 0`,
		"offset.json":              `segment 0 offset is "33554432", not "16777216"`,
		"token.json":               `the header has token "0" of type "luks2-keyring"`,
	}
	for name, says := range files {
		t.Run(name, func(t *testing.T) { expectRefused(t, readHeader(t, name), says) })
	}
	for name, c := range map[string]struct {
		edit func(d map[string]any)
		says string
	}{
		"integrity alone": {func(d map[string]any) { segment0(d)["integrity"] = map[string]any{"type": "hmac(sha256)"} },
			`segment 0 has "integrity", which this driver never writes`},
		"linear segment":  {func(d map[string]any) { segment0(d)["type"] = "linear" }, `segment 0 type is "linear", not "crypt"`},
		"fixed size":      {func(d map[string]any) { segment0(d)["size"] = "1048576" }, `segment 0 size is "1048576", not "dynamic"`},
		"iv tweak":        {func(d map[string]any) { segment0(d)["iv_tweak"] = "8" }, `segment 0 iv_tweak is "8", not "0"`},
		"sector size":     {func(d map[string]any) { segment0(d)["sector_size"] = json.Number("8192") }, `segment 0 sector_size is 8192`},
		"segment flags":   {func(d map[string]any) { segment0(d)["flags"] = []any{"backup-previous"} }, `segment 0 has "flags"`},
		"second segment":  {func(d map[string]any) { obj(d["segments"])["1"] = segment0(d) }, `2 segments`},
		"no segment":      {func(d map[string]any) { d["segments"] = map[string]any{} }, `0 segments`},
		"segments a list": {func(d map[string]any) { d["segments"] = []any{} }, `the header segments is a list of 0, not an object`},
		"argon2id keyslot": {func(d map[string]any) { obj(keyslot0(d)["kdf"])["type"] = "argon2id" },
			`keyslot 0 kdf type is "argon2id", not "pbkdf2"`},
		"fewer iterations": {func(d map[string]any) { obj(keyslot0(d)["kdf"])["iterations"] = json.Number("1") },
			`keyslot 0 kdf iterations is 1, not 1000`},
		"iterations as a string": {func(d map[string]any) { obj(keyslot0(d)["kdf"])["iterations"] = "1000" },
			`keyslot 0 kdf iterations is "1000", not 1000`},
		"short keyslot key": {func(d map[string]any) { keyslot0(d)["key_size"] = json.Number("32") }, `keyslot 0 key_size is 32, not 64`},
		"short area key":    {func(d map[string]any) { obj(keyslot0(d)["area"])["key_size"] = json.Number("32") }, `keyslot 0 area key_size is 32, not 64`},
		"area of another type": {func(d map[string]any) { obj(keyslot0(d)["area"])["type"] = "datashift" },
			`keyslot 0 area type is "datashift", not "raw"`},
		"one stripe":       {func(d map[string]any) { obj(keyslot0(d)["af"])["stripes"] = json.Number("1") }, `keyslot 0 af stripes is 1, not 4000`},
		"keyslot priority": {func(d map[string]any) { keyslot0(d)["priority"] = json.Number("2") }, `keyslot 0 has "priority"`},
		"reencrypt keyslot": {func(d map[string]any) { keyslot0(d)["type"] = "reencrypt" },
			`keyslot 0 type is "reencrypt", not "luks2"`},
		"digest of two segments": {func(d map[string]any) { digest0(d)["segments"] = []any{"0", "1"} },
			`digest 0 segments is a list of 2, not ["0"]`},
		"digest of another keyslot": {func(d map[string]any) { digest0(d)["keyslots"] = []any{"1"} }, `digest 0 keyslots is a list of 1`},
		"second digest":             {func(d map[string]any) { obj(d["digests"])["1"] = digest0(d) }, `2 digests`},
		"config flags": {func(d map[string]any) { obj(d["config"])["flags"] = []any{"allow-discards"} },
			`config has "flags", which this driver never writes`},
		"config requirements": {func(d map[string]any) {
			obj(d["config"])["requirements"] = map[string]any{"mandatory": []any{"online-reencrypt-v2"}}
		}, `config has "requirements"`},
		"odd json size":       {func(d map[string]any) { obj(d["config"])["json_size"] = "-1" }, `config json_size is "-1", not a size`},
		"unknown section":     {func(d map[string]any) { d["extra"] = map[string]any{} }, `the header has "extra"`},
		"no tokens":           {func(d map[string]any) { delete(d, "tokens") }, `the header has no tokens`},
		"a systemd tpm token": {func(d map[string]any) { d["tokens"] = map[string]any{"3": map[string]any{"type": "systemd-tpm2"}} }, `token "3" of type "systemd-tpm2"`},
	} {
		t.Run(name, func(t *testing.T) { expectRefused(t, edited(t, c.edit), c.says) })
	}
}

// expectRefused checks that Check refuses h as foreign, saying says and
// quoting none of the header's salts or digests.
func expectRefused(t *testing.T, h Header, says string) {
	t.Helper()
	err := h.Check()
	if !errors.Is(err, ErrForeignHeader) || !strings.Contains(err.Error(), says) {
		t.Fatalf("Check = %v\nwant ErrForeignHeader saying %s", err, says)
	}
	for _, secretish := range []any{obj(keyslot0(h.doc)["kdf"])["salt"], digest0(h.doc)["salt"], digest0(h.doc)["digest"]} {
		if s, _ := secretish.(string); s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("the refusal quotes a salt or digest: %v", err)
		}
	}
}

func TestHeaderDigest(t *testing.T) {
	h := readHeader(t, "formatted.json")
	// The same JSON written otherwise (key order, spaces) digests the same.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "\t")
	if err := enc.Encode(h.doc); err != nil {
		t.Fatal(err)
	}
	again, err := ParseHeader(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest() != h.Digest() {
		t.Fatal("the digest depends on how the JSON is laid out")
	}
	for name, edit := range map[string]func(d map[string]any){
		"keyslot salt":   func(d map[string]any) { obj(keyslot0(d)["kdf"])["salt"] = "AAAA" },
		"area offset":    func(d map[string]any) { obj(keyslot0(d)["area"])["offset"] = "65536" },
		"digest":         func(d map[string]any) { digest0(d)["digest"] = "AAAA" },
		"sector size":    func(d map[string]any) { segment0(d)["sector_size"] = json.Number("512") },
		"config":         func(d map[string]any) { obj(d["config"])["keyslots_size"] = "4096" },
		"a token":        func(d map[string]any) { d["tokens"] = map[string]any{"0": map[string]any{"type": "x"}} },
		"number written": func(d map[string]any) { keyslot0(d)["key_size"] = json.Number("64.0") },
	} {
		if edited(t, edit).Digest() == h.Digest() {
			t.Errorf("%s: the digest does not change", name)
		}
	}
	if readHeader(t, "offset.json").Digest() == h.Digest() {
		t.Error("two headers have one digest")
	}
}

func TestParseHeaderRefusesNonObjects(t *testing.T) {
	for _, js := range []string{"", "null", "[]", `"x"`, "{"} {
		if _, err := ParseHeader([]byte(js)); err == nil {
			t.Errorf("ParseHeader(%q) = nil error", js)
		}
	}
}

func TestCheckActive(t *testing.T) {
	name := Name("vol")
	ok := string(activeOn(name, "/dev/rbd0", "read/write"))
	for _, tc := range []struct {
		what, out, says string
	}{
		{"as Format's header makes it", ok, ""},
		{"cipher_null", strings.NewReplacer("aes-xts-plain64", "cipher_null-ecb", "512 bits", "0 bits").Replace(ok), `cipher "cipher_null-ecb", not "aes-xts-plain64"`},
		{"a shorter key", strings.Replace(ok, "512 bits", "256 bits", 1), `keysize "256 bits", not "512 bits"`},
		{"another offset", strings.Replace(ok, "32768 sectors", "4096 sectors", 1), `offset "4096 sectors", not "32768 sectors"`},
		{"integrity", strings.Replace(ok, "  mode:", "  integrity: hmac(sha256)\n  integrity keysize: 256 bits\n  mode:", 1), `integrity "hmac(sha256)", not ""`},
		{"plain dm-crypt", strings.Replace(ok, "LUKS2", "PLAIN", 1), `type "PLAIN", not "LUKS2"`},
	} {
		f := &fake{reply: func([]string) ([]byte, error) { return []byte(tc.out), nil }}
		err := New(Options{Runner: f}).CheckActive(context.Background(), name)
		switch {
		case tc.says == "" && err != nil:
			t.Errorf("%s: %v", tc.what, err)
		case tc.says != "" && (!errors.Is(err, ErrForeignHeader) || !strings.Contains(err.Error(), tc.says)):
			t.Errorf("%s: %v, want ErrForeignHeader saying %s", tc.what, err, tc.says)
		}
		if got := f.argv(); !reflect.DeepEqual(got, []string{"cryptsetup status " + name}) {
			t.Errorf("%s: ran %q", tc.what, got)
		}
	}
	f := &fake{reply: func([]string) ([]byte, error) { return nil, inactive }}
	if err := New(Options{Runner: f}).CheckActive(context.Background(), name); err == nil || !strings.Contains(err.Error(), "is not open") {
		t.Errorf("CheckActive of a closed device = %v", err)
	}
	if err := New(Options{Runner: &fake{}}).CheckActive(context.Background(), "other"); err == nil {
		t.Error("CheckActive of a name not ours = nil")
	}
}

// Header reads a copy of the device's header, in a directory of its own
// under HeaderDir, and the open that follows can use that copy; Remove
// deletes it, and PrepareHeaderDir what a crash left.
func TestHeaderReadsACopy(t *testing.T) {
	js, err := os.ReadFile(filepath.Join("testdata", "formatted.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var copied string
	f := &fake{reply: func(args []string) ([]byte, error) {
		switch args[0] {
		case "luksHeaderBackup":
			copied = args[3]
			return nil, os.WriteFile(copied, []byte("a header"), 0o600)
		case "luksDump":
			if args[2] != copied {
				return nil, fmt.Errorf("luksDump of %s, not of the copy %s", args[2], copied)
			}
			return js, nil
		}
		return nil, errors.New("unexpected call")
	}}
	h, err := New(Options{Runner: f, HeaderDir: dir}).Header(context.Background(), "/dev/rbd0")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"cryptsetup luksHeaderBackup /dev/rbd0 --header-backup-file " + copied,
		"cryptsetup luksDump --dump-json-metadata " + copied,
	}
	if got := f.argv(); !slices.Equal(got, want) {
		t.Errorf("argv %q, want %q", got, want)
	}
	for _, c := range f.calls {
		if c.stdin != nil {
			t.Errorf("%s was given stdin", c.argv)
		}
	}
	if h.File() != copied || filepath.Dir(filepath.Dir(copied)) != dir {
		t.Errorf("the copy is %q, made at %q, not in a directory of its own under %s", h.File(), copied, dir)
	}
	if err := h.Check(); err != nil {
		t.Errorf("the copy's metadata: %v", err)
	}
	h.Remove()
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("Remove left %v", left)
	}

	// A failed copy or dump leaves nothing either.
	f.reply = func(args []string) ([]byte, error) {
		return nil, failed(1, "Device /dev/rbd0 is not a valid LUKS device.")
	}
	if _, err := New(Options{Runner: f, HeaderDir: dir}).Header(context.Background(), "/dev/rbd0"); err == nil || !strings.Contains(err.Error(), "copying the LUKS2 header of /dev/rbd0") {
		t.Errorf("a failed copy: %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("a failed copy left %v", left)
	}

	f = &fake{}
	if _, err := New(Options{Runner: f, HeaderDir: dir}).Header(context.Background(), "--help"); err == nil || len(f.calls) != 0 {
		t.Errorf("Header(--help) = %v after %q", err, f.argv())
	}

	// A crash's leftovers go at the next start; other files stay.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, headerCopyPrefix+"123"), 0o700))
	must(os.WriteFile(filepath.Join(dir, headerCopyPrefix+"123", "header"), nil, 0o600))
	must(os.WriteFile(filepath.Join(dir, "other"), nil, 0o600))
	must(PrepareHeaderDir(dir))
	if left, _ := os.ReadDir(dir); len(left) != 1 || left[0].Name() != "other" {
		t.Errorf("PrepareHeaderDir left %v", left)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("the header directory: %v, %v", st.Mode(), err)
	}
	if err := PrepareHeaderDir("relative"); err == nil {
		t.Error("a relative header directory was taken")
	}
}
