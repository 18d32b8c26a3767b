package node

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/luks"
)

// Anyone who can write a volume's image can write a LUKS2 header on it:
// cryptsetup accepts any header whose unkeyed checksum matches, one whose
// keyslot opens with any passphrase or whose data segment is cipher_null
// included. The node therefore opens only a header that is shaped exactly
// as luks.Format writes it (luks.Header.Check) and, once the volume's key
// record holds one, that the record's MAC binds to the volume's DEK
// (kms.HeaderMAC). A header that passes the shape check and opens with
// the DEK was made by a holder of the DEK: its keyslot is encrypted under
// a key derived from it.

// checkedHeader is a header that passed checkHeader: the copy of it that
// the open uses (luks.Header.File), and its MAC under the volume's DEK.
type checkedHeader struct {
	copy luks.Header
	mac  kms.HeaderMAC
}

// checkHeader copies the LUKS2 header on the volume's device, before
// anything opens it, and refuses one this driver did not write. The
// caller opens with the copy and removes it (copy.Remove).
func (n *Node) checkHeader(ctx context.Context, rec *record, key *volumeKey) (checkedHeader, error) {
	h, err := n.crypt.Header(ctx, rec.Device)
	if err != nil {
		return checkedHeader{}, fmt.Errorf("volume %s: %w", rec.VolumeID, err)
	}
	mac, err := bindHeader(rec, key, h)
	if err != nil {
		h.Remove()
		return checkedHeader{}, err
	}
	return checkedHeader{copy: h, mac: mac}, nil
}

// bindHeader checks h and returns its MAC under the volume's DEK.
func bindHeader(rec *record, key *volumeKey, h luks.Header) (kms.HeaderMAC, error) {
	if err := h.Check(); err != nil {
		return "", foreignHeader(rec, err)
	}
	digest := h.Digest()
	if key.rec.Header != "" && !key.rec.Header.Verify(key.dek, digest[:]) {
		return "", foreignHeader(rec, fmt.Errorf("%w: it is not the header that the key record's %s binds to the volume's data key", luks.ErrForeignHeader, kms.MetaHeader))
	}
	mac, err := kms.NewHeaderMAC(key.dek, digest[:])
	if err != nil {
		return "", fmt.Errorf("volume %s: %w", rec.VolumeID, err)
	}
	return mac, nil
}

// checkOpened holds the open dm-crypt device to what a header of ours
// gives (luks.CheckActive). The open used the checked copy of the header,
// so this is a second line: a cryptsetup that read the device's header
// after all, or a table changed since. A device that runs anything else
// is closed at once, before anything mounts or publishes it.
func (n *Node) checkOpened(ctx context.Context, rec *record) error {
	err := n.crypt.CheckActive(ctx, rec.Crypt)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, luks.ErrForeignHeader):
		return fmt.Errorf("volume %s: checking its open dm-crypt device: %w", rec.VolumeID, err)
	}
	if cerr := n.crypt.Close(ctx, rec.Crypt); cerr != nil {
		// undoStage closes it again, and leaves the record for an
		// unstage if it still cannot.
		klog.ErrorS(cerr, "closing a dm-crypt device that runs another header", "volumeID", rec.VolumeID, "name", rec.Crypt)
	}
	return foreignHeader(rec, err)
}

// foreignHeader is the refusal of a header the driver did not write. It
// names what was found (never key material) and where to look.
func foreignHeader(rec *record, why error) error {
	found := strings.TrimPrefix(why.Error(), luks.ErrForeignHeader.Error()+": ")
	return status.Errorf(codes.FailedPrecondition,
		"volume %s: the LUKS header on the volume (%s) is not the one this driver wrote (%s); the node refuses to open it. "+
			"Someone with write access to the volume's pool may have replaced or altered it: check who can write to the pool, "+
			"compare `cryptsetup luksDump` of the image with one of its snapshots, and restore the volume from a snapshot or backup you trust",
		rec.VolumeID, rec.Device, found)
}
