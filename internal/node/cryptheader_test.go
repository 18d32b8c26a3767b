package node

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/luks"
)

const dev = "/dev/fake0" // the fake mapper's device

// boundTo is the header MAC of the header JSON js under dek.
func boundTo(t *testing.T, dek, js []byte) kms.HeaderMAC {
	t.Helper()
	h, err := luks.ParseHeader(js)
	if err != nil {
		t.Fatal(err)
	}
	d := h.Digest()
	mac, err := kms.NewHeaderMAC(dek, d[:])
	if err != nil {
		t.Fatal(err)
	}
	return mac
}

// otherHeader is a header shaped as Format writes it, but not the one
// goodHeader is (another keyslot salt).
func otherHeader(t *testing.T) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(goodHeader, &doc); err != nil {
		t.Fatal(err)
	}
	doc["keyslots"].(map[string]any)["0"].(map[string]any)["kdf"].(map[string]any)["salt"] = "cGxhbnRlZCBieSBzb21lb25lIGVsc2UgLi4uLi4uLi4="
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func planted(t *testing.T, name string) []byte {
	t.Helper()
	js, err := os.ReadFile("../luks/testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func TestEncryptedStageBindsTheHeaderItFormats(t *testing.T) {
	f := newCryptFixture(t)
	if _, err := f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(rwo))); err != nil {
		t.Fatal(err)
	}
	if got, want := kms.HeaderMAC(f.images.md[kms.MetaHeader]), boundTo(t, f.dek, goodHeader); got != want {
		t.Fatalf("header MAC %q after the format, want %q", got, want)
	}
	if f.state() != string(kms.StateFormatted) {
		t.Errorf("state %q", f.state())
	}
	// Read back and checked after the format, and the open device checked.
	name := luks.Name(volID)
	if want := []string{"format " + dev, "header " + dev, "open " + name, "check " + name}; !slices.Equal(f.crypt.calls, want) {
		t.Errorf("calls %q, want %q", f.crypt.calls, want)
	}
	for _, v := range f.images.md {
		if strings.Contains(v, string(f.dek)) {
			t.Error("the DEK is in the image's metadata")
		}
	}
}

// A header someone planted on a volume not yet formatted is refused
// before anything opens it, even one the volume's own DEK would open; the
// volume is unmapped again and its record is unchanged.
func TestEncryptedStageRefusesAPlantedHeader(t *testing.T) {
	for file, says := range map[string]string{
		"segment-cipher-null.json": `segment 0 encryption is "cipher_null-ecb"`,
		"keyslot-cipher-null.json": `keyslot 0 area encryption is "cipher_null-ecb"`,
		"second-keyslot.json":      "2 keyslots",
		"token.json":               "token",
		"integrity.json":           "aes-xts-random",
		"offset.json":              "offset",
	} {
		t.Run(file, func(t *testing.T) {
			f := newCryptFixture(t)
			f.crypt.headers[dev] = f.dek
			f.crypt.jsons[dev] = planted(t, file)
			before := maps.Clone(f.images.md)
			_, err := f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(rwo)))
			expectForeignHeader(t, f, err, says)
			if !maps.Equal(f.images.md, before) {
				t.Errorf("the key record changed: %v", f.images.md)
			}
		})
	}
}

// A formatted volume whose header is not the one its record binds to its
// DEK is refused, though the header is shaped as Format writes it.
func TestEncryptedStageRefusesAHeaderItDidNotBind(t *testing.T) {
	f := newCryptFixture(t)
	f.crypt.headers[dev] = f.dek
	f.images.md[kms.MetaState] = string(kms.StateFormatted)
	f.images.md[kms.MetaHeader] = string(boundTo(t, f.dek, goodHeader))
	f.crypt.jsons[dev] = otherHeader(t)
	_, err := f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(rwo)))
	expectForeignHeader(t, f, err, kms.MetaHeader)

	// The bound header opens.
	delete(f.crypt.jsons, dev)
	f.crypt.calls = nil
	if _, err := f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(rwo))); err != nil {
		t.Fatal(err)
	}
}

// expectForeignHeader checks a refused stage: FailedPrecondition saying
// the header is not the driver's and what was found, nothing opened,
// formatted, mounted or left mapped.
func expectForeignHeader(t *testing.T, f *cryptFixture, err error, says string) {
	t.Helper()
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "is not the one this driver wrote") ||
		!strings.Contains(err.Error(), "refuses to open it") || !strings.Contains(err.Error(), says) {
		t.Fatalf("stage: %v\nwant FailedPrecondition: not the driver's header, refused, saying %s", err, says)
	}
	if strings.Contains(err.Error(), string(f.dek)) || strings.Contains(err.Error(), f.kek) {
		t.Error("the refusal holds key material")
	}
	if countPrefix(f.crypt.calls, "open ") != 0 || countPrefix(f.crypt.calls, "format ") != 0 || len(f.crypt.open) != 0 {
		t.Errorf("calls %v, open %v: want no format and no open", f.crypt.calls, f.crypt.open)
	}
	if mps, _ := f.mounter.List(); len(mps) != 0 || len(f.m.mapped) != 0 {
		t.Errorf("mounted %v, mapped %v after the refusal", mps, f.m.mapped)
	}
	if rec, _ := f.n.store.load(volID); rec != nil {
		t.Errorf("a state record stays: %+v", rec)
	}
}

// A clone's first stage, or the one after a crash between format and
// record: state prepared with a header on the device. A header that
// passes the check opens, and the state and the MAC are recorded in one
// SetMetadata; a read-only stage records nothing.
func TestEncryptedStageBindsAnInheritedHeader(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("read-only %v", readOnly), func(t *testing.T) {
			f := newCryptFixture(t)
			f.crypt.headers[dev] = f.dek
			c := blockCapOf(rwo)
			if readOnly {
				c = blockCapOf(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)
			}
			sets := f.countSets()
			if _, err := f.n.NodeStageVolume(context.Background(), f.stageReq(c)); err != nil {
				t.Fatal(err)
			}
			if countPrefix(f.crypt.calls, "format ") != 0 || len(f.crypt.open) != 1 {
				t.Fatalf("calls %v: want an open without a format", f.crypt.calls)
			}
			switch {
			case readOnly && (*sets != 0 || f.state() != string(kms.StatePrepared) || f.images.md[kms.MetaHeader] != ""):
				t.Errorf("a read-only stage wrote %d times: state %q, MAC %q", *sets, f.state(), f.images.md[kms.MetaHeader])
			case !readOnly && (*sets != 1 || f.state() != string(kms.StateFormatted) || kms.HeaderMAC(f.images.md[kms.MetaHeader]) != boundTo(t, f.dek, goodHeader)):
				t.Errorf("%d SetMetadata calls, state %q, MAC %q: want one, formatted and bound", *sets, f.state(), f.images.md[kms.MetaHeader])
			}
		})
	}
}

// A volume formatted before the binding has no MAC: its header is checked
// for its shape, and its next writable stage records the MAC (a read-only
// one does not).
func TestEncryptedStageBindsAnOldFormattedVolume(t *testing.T) {
	f := newCryptFixture(t)
	f.crypt.headers[dev] = f.dek
	f.images.md[kms.MetaState] = string(kms.StateFormatted)
	ro := blockCapOf(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)
	if _, err := f.n.NodeStageVolume(context.Background(), f.stageReq(ro)); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.images.md[kms.MetaHeader]; ok {
		t.Fatal("a read-only stage recorded the header MAC")
	}
	if _, err := f.n.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: volID, StagingTargetPath: f.stageReq(ro).StagingTargetPath}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.n.NodeStageVolume(context.Background(), f.stageReq(blockCapOf(rwo))); err != nil {
		t.Fatal(err)
	}
	if got := kms.HeaderMAC(f.images.md[kms.MetaHeader]); got != boundTo(t, f.dek, goodHeader) {
		t.Fatalf("header MAC %q after a writable stage of an old volume", got)
	}

	// An old volume's header is still held to its shape.
	g := newCryptFixture(t)
	g.crypt.headers[dev] = g.dek
	g.crypt.jsons[dev] = planted(t, "segment-cipher-null.json")
	g.images.md[kms.MetaState] = string(kms.StateFormatted)
	_, err := g.n.NodeStageVolume(context.Background(), g.stageReq(blockCapOf(rwo)))
	expectForeignHeader(t, g, err, "cipher_null-ecb")
}

// The open device is held to what the header said: one that runs
// anything else is closed, and nothing is mounted.
func TestEncryptedStageClosesADeviceThatRunsAnotherHeader(t *testing.T) {
	f := newCryptFixture(t)
	f.crypt.activeErr = fmt.Errorf("%w: the open device %s has cipher \"cipher_null-ecb\", not \"aes-xts-plain64\"", luks.ErrForeignHeader, luks.Name(volID))
	_, err := f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(rwo)))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "is not the one this driver wrote") || !strings.Contains(err.Error(), "cipher_null-ecb") {
		t.Fatalf("stage: %v", err)
	}
	if countPrefix(f.crypt.calls, "close ") == 0 || len(f.crypt.open) != 0 {
		t.Errorf("calls %v, open %v: want the device closed", f.crypt.calls, f.crypt.open)
	}
	if mps, _ := f.mounter.List(); len(mps) != 0 || len(f.m.mapped) != 0 {
		t.Errorf("mounted %v, mapped %v", mps, f.m.mapped)
	}
}

// A record holding a header MAC says a header was written: a device
// without one is not formatted again (the MAC goes down before the state).
func TestEncryptedStageNeverFormatsABoundVolume(t *testing.T) {
	f := newCryptFixture(t)
	f.images.md[kms.MetaHeader] = string(boundTo(t, f.dek, goodHeader))
	_, err := f.n.NodeStageVolume(context.Background(), f.stageReq(fsCap(rwo)))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "refusing to format it again") {
		t.Fatalf("stage: %v", err)
	}
	if countPrefix(f.crypt.calls, "format ") != 0 {
		t.Errorf("calls %v", f.crypt.calls)
	}
}

// countSets counts the SetMetadata calls from now on.
func (f *cryptFixture) countSets() *int {
	n := new(int)
	f.images.onSet = func(map[string]string) { *n++ }
	return n
}
