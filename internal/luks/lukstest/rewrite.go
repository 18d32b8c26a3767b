// Package lukstest plants LUKS2 headers for tests: it rewrites a header's
// JSON metadata in place, as someone who can write a volume's image but
// holds none of its keys can, since the header's checksums are unkeyed.
package lukstest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
)

// The LUKS2 binary header (cryptsetup's struct luks2_hdr_disk): 4096
// bytes, then the JSON area, the two together hdr_size bytes and
// checksummed; a second copy follows the first.
const (
	binLen      = 4096
	offHdrSize  = 8   // uint64, big-endian
	offCsumAlg  = 72  // char[32]
	offCsum     = 448 // char[64]
	csumLen     = 64
	primary     = "LUKS\xba\xbe"
	secondary   = "SKUL\xba\xbe"
	magicLength = 6
)

// RewriteJSON decodes the LUKS2 JSON metadata of the header on device (a
// block device or a file), lets edit change it, and writes it back into
// both header copies with their checksums made anew. Numbers reach edit as
// json.Number.
func RewriteJSON(device string, edit func(doc map[string]any)) error {
	f, err := os.OpenFile(device, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, binLen)
	if _, err := f.ReadAt(head, 0); err != nil {
		return fmt.Errorf("reading the LUKS2 header of %s: %w", device, err)
	}
	if string(head[:magicLength]) != primary || binary.BigEndian.Uint16(head[magicLength:]) != 2 {
		return fmt.Errorf("%s does not start with a LUKS2 header", device)
	}
	size := int64(binary.BigEndian.Uint64(head[offHdrSize:]))
	if size <= binLen || size > 4<<20 {
		return fmt.Errorf("%s: LUKS2 header size %d", device, size)
	}
	hdr := make([]byte, size)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return err
	}
	area := hdr[binLen:]
	d := json.NewDecoder(bytes.NewReader(bytes.TrimRight(area, "\x00")))
	d.UseNumber()
	var doc map[string]any
	if err := d.Decode(&doc); err != nil {
		return fmt.Errorf("the JSON area of %s: %w", device, err)
	}
	edit(doc)
	js, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	if len(js) >= len(area) {
		return fmt.Errorf("the edited JSON (%d bytes) does not fit the %d-byte area", len(js), len(area))
	}
	for at, magic := range map[int64]string{0: primary, size: secondary} {
		copyHdr := make([]byte, size)
		if _, err := f.ReadAt(copyHdr, at); err != nil {
			return fmt.Errorf("reading the header copy at %d of %s: %w", at, device, err)
		}
		if string(copyHdr[:magicLength]) != magic {
			return fmt.Errorf("%s holds no LUKS2 header copy at %d", device, at)
		}
		if alg := string(bytes.TrimRight(copyHdr[offCsumAlg:offCsumAlg+32], "\x00")); alg != "sha256" {
			return fmt.Errorf("%s: header checksum %q, only sha256 is rewritten", device, alg)
		}
		clear(copyHdr[binLen:])
		copy(copyHdr[binLen:], js)
		clear(copyHdr[offCsum : offCsum+csumLen])
		sum := sha256.Sum256(copyHdr)
		copy(copyHdr[offCsum:], sum[:])
		if _, err := f.WriteAt(copyHdr, at); err != nil {
			return err
		}
	}
	return f.Sync()
}
