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

// checkHeader reads the LUKS2 header on the volume's device, before
// anything opens it, and refuses one this driver did not write. It
// returns the header's MAC under the volume's DEK, for the record.
func (n *Node) checkHeader(ctx context.Context, rec *record, key *volumeKey) (kms.HeaderMAC, error) {
	h, err := n.crypt.Header(ctx, rec.Device)
	if err != nil {
		return "", fmt.Errorf("volume %s: %w", rec.VolumeID, err)
	}
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
// gives (luks.CheckActive): the header was checked before the open, and
// could have been changed in between. A device that runs anything else
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
