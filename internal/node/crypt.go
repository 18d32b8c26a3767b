package node

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/luks"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// An encrypted volume is LUKS2 on the mapped device, opened with the
// volume's DEK as the passphrase: the controller draws the DEK and keeps
// it wrapped in the image's metadata (kms.VolumeKey); the node unwraps it
// with a KEK from the stage call's secret, formats the device the first
// time (state prepared -> formatted), and mounts or publishes the
// dm-crypt device instead of the mapped one.

// Crypt formats, checks, opens and closes LUKS2 devices (internal/luks).
type Crypt interface {
	Format(ctx context.Context, device string, key []byte) error
	IsLUKS(ctx context.Context, device string) (bool, error)
	Header(ctx context.Context, device string) (luks.Header, error)
	Open(ctx context.Context, device, name string, key []byte, o luks.OpenOptions) (string, error)
	CheckActive(ctx context.Context, name string) error
	Close(ctx context.Context, name string) error
	Resize(ctx context.Context, name string) error
	Active(ctx context.Context) ([]luks.Mapping, error)
}

// Images reads and writes a volume image's metadata, where an encrypted
// volume's key record lives (internal/rbd/ceph).
type Images interface {
	Stat(ctx context.Context, p rbd.Pool, name string) (rbd.ImageInfo, error)
	SetMetadata(ctx context.Context, p rbd.Pool, name string, kv map[string]string) error
}

// volumeKey is an encrypted volume's unwrapped DEK and where its record
// is, for the state change after formatting.
type volumeKey struct {
	dek      []byte
	rec      kms.VolumeKey
	pool     rbd.Pool
	image    string
	discards bool
}

// clear drops the DEK from memory once the device is open.
func (k *volumeKey) clear() {
	if k != nil {
		clear(k.dek)
	}
}

// unlock reads an encrypted volume's key record and unwraps its DEK; a
// plain volume gives nil. It runs before anything is mapped, so a wrong or
// missing key changes nothing.
func (n *Node) unlock(ctx context.Context, vol volid.Volume, cl cluster.Cluster, cred cluster.Credentials, enc config.Encryption, secrets map[string]string) (*volumeKey, error) {
	if !enc.Enabled {
		// A plain stage of an encrypted image finds crypto_LUKS on the
		// device: it is neither formatted nor mounted (mountStaging).
		return nil, nil
	}
	if n.images == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is encrypted, and this node plugin cannot read image metadata", vol)
	}
	pool := rbd.NewPool(cl, cred, vol.Pool)
	info, err := n.images.Stat(ctx, pool, vol.Image)
	if err != nil {
		return nil, readStatus(vol, "the key record", err)
	}
	rec, ok, err := kms.ReadVolumeKey(info.Metadata)
	switch {
	case err != nil:
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s: %v; refusing to touch it", vol, err)
	case !ok && enc.Enabled:
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is encrypted by its volume context (KMS %s), but its image carries no key record; refusing to use it as plain data", vol, enc.KMSID)
	case !ok:
		return nil, nil
	}
	if n.kms == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is encrypted (KMS %s), and this node plugin runs without --kms-config", vol, rec.KMSID)
	}
	if n.mixedKeys {
		secrets = kms.WithoutCredentials(secrets)
	}
	keys, err := n.kms.Open(rec.KMSID, secrets)
	if err != nil {
		return nil, kmsStatus(vol, rec.KMSID, err)
	}
	// The binding is the image the volume ID names: a key record copied
	// from another image does not unwrap here.
	b := kms.Binding{KMSID: rec.KMSID, Pool: pool.Name, Namespace: pool.Namespace, Image: vol.Image}
	dek, err := keys.Unwrap(ctx, rec.DEK, b)
	if err != nil {
		return nil, kmsStatus(vol, rec.KMSID, err)
	}
	return &volumeKey{dek: dek, rec: rec, pool: pool, image: vol.Image, discards: enc.AllowDiscards}, nil
}

// kmsStatus answers a KEK that is missing (FailedPrecondition: the secret
// lacks it), wrong (PermissionDenied) or out of reach (Unavailable: a KMS
// that does not answer). Messages name the KMS and the secret's keys,
// never key material.
func kmsStatus(vol volid.Volume, kmsID string, err error) error {
	code := codes.FailedPrecondition
	switch {
	case errors.Is(err, kms.ErrWrongKEK):
		code = codes.PermissionDenied
	case errors.Is(err, kms.ErrUnavailable):
		code = codes.Unavailable // the KMS is down: kubelet retries
	}
	return status.Errorf(code, "volume %s (KMS %s): %v (the node-stage secret holds the KEKs)", vol, kmsID, err)
}

// openCrypt puts LUKS on the mapped device of rec, formatting it only in
// state prepared and only when it holds no signature at all, and opens
// it. A header found on the device is opened only if it is one this
// driver wrote (checkHeader), from the copy that was checked, and the open
// device only kept if it runs what that header says (checkOpened). The dm
// name is recorded before the device is opened, so that an unstage after
// a crash knows to close it.
func (n *Node) openCrypt(ctx context.Context, rec *record, key *volumeKey) error {
	defer key.clear()
	if n.crypt == nil {
		return status.Errorf(codes.FailedPrecondition, "volume %s is encrypted, and this node plugin has no cryptsetup", rec.VolumeID)
	}
	isLUKS, err := n.crypt.IsLUKS(ctx, rec.Device)
	if err != nil {
		return fmt.Errorf("volume %s: %w", rec.VolumeID, err)
	}
	var hdr checkedHeader
	if isLUKS {
		hdr, err = n.checkHeader(ctx, rec, key)
	} else {
		hdr, err = n.formatCrypt(ctx, rec, key)
	}
	if err != nil {
		return err
	}
	defer hdr.copy.Remove()
	rec.Crypt = luks.Name(rec.VolumeID)
	if err := n.store.save(rec); err != nil {
		return err
	}
	opts := luks.OpenOptions{ReadOnly: rec.Cap.readerOnly(), AllowDiscards: key.discards, Header: hdr.copy.File()}
	if _, err := n.crypt.Open(ctx, rec.Device, rec.Crypt, key.dek, opts); err != nil {
		if errors.Is(err, luks.ErrWrongKey) {
			return status.Errorf(codes.PermissionDenied, "volume %s (KMS %s): its data key does not open the LUKS header: the key record does not belong to this image", rec.VolumeID, key.rec.KMSID)
		}
		return fmt.Errorf("volume %s: %w", rec.VolumeID, err)
	}
	n.fault("NodeStage:cryptOpened")
	if err := n.checkOpened(ctx, rec); err != nil {
		return err
	}
	if rec.Cap.readerOnly() {
		return nil // a read-only stage writes nothing, the record included
	}
	if key.rec.State != kms.StateFormatted || key.rec.Header == "" {
		// A header in state prepared (a crash came between the format and
		// the record, or a clone inherited its parent's header), or one
		// formatted before the binding: it passed checkHeader, and is
		// bound now.
		return n.recordFormatted(ctx, key, hdr.mac)
	}
	return nil
}

// formatCrypt writes the LUKS header on a device that holds nothing, in
// state prepared only: a formatted volume without a header lost it, and
// formatting again would destroy what is left. A header MAC in the record
// says the same (the MAC is written before the state). It returns the
// new header, checked, to open.
func (n *Node) formatCrypt(ctx context.Context, rec *record, key *volumeKey) (checkedHeader, error) {
	switch {
	case key.rec.State == kms.StateFormatted || key.rec.Header != "":
		return checkedHeader{}, status.Errorf(codes.FailedPrecondition, "volume %s is recorded as encrypted and formatted, but %s holds no LUKS header: refusing to format it again", rec.VolumeID, rec.Device)
	case rec.Cap.readerOnly():
		return checkedHeader{}, status.Errorf(codes.FailedPrecondition, "volume %s was never formatted and its access mode %s is read-only: it will not be formatted", rec.VolumeID, rec.Cap.AccessMode)
	}
	format, err := n.diskFormat(ctx, rec.Device)
	if err != nil {
		return checkedHeader{}, err
	}
	if format != "" {
		return checkedHeader{}, status.Errorf(codes.FailedPrecondition, "volume %s is to be encrypted, but %s holds %s: refusing to format it", rec.VolumeID, rec.Device, format)
	}
	klog.InfoS("formatting empty volume with LUKS2", "volumeID", rec.VolumeID, "device", rec.Device)
	if err := n.crypt.Format(ctx, rec.Device, key.dek); err != nil {
		return checkedHeader{}, fmt.Errorf("volume %s: %w", rec.VolumeID, err)
	}
	n.fault("NodeStage:luksFormatted")
	// The header is bound as read back and checked like any other: one
	// that is not what Format should write is refused now, not at the
	// next stage.
	hdr, err := n.checkHeader(ctx, rec, key)
	if err != nil {
		return checkedHeader{}, err
	}
	if err := n.recordFormatted(ctx, key, hdr.mac); err != nil {
		hdr.copy.Remove()
		return checkedHeader{}, err
	}
	return hdr, nil
}

// recordFormatted moves the volume's state to formatted and records the
// header's MAC, in one SetMetadata. Keys are written in sorted order, the
// MAC before the state: a crash between them leaves state prepared with a
// MAC that verifies, which the next stage completes.
func (n *Node) recordFormatted(ctx context.Context, key *volumeKey, mac kms.HeaderMAC) error {
	kv := map[string]string{kms.MetaState: string(kms.StateFormatted), kms.MetaHeader: string(mac)}
	if err := n.images.SetMetadata(ctx, key.pool, key.image, kv); err != nil {
		return fmt.Errorf("recording that volume image %s is formatted: %w", key.image, err)
	}
	key.rec.State, key.rec.Header = kms.StateFormatted, mac
	return nil
}

// closeCrypt closes the volume's dm-crypt device, if it has one open.
func (n *Node) closeCrypt(ctx context.Context, rec *record) error {
	if rec.Crypt == "" {
		return nil
	}
	if n.crypt == nil {
		return fmt.Errorf("volume %s has dm-crypt device %s open, and this node plugin has no cryptsetup to close it", rec.VolumeID, rec.Crypt)
	}
	return n.crypt.Close(ctx, rec.Crypt)
}

// cryptOn names our dm-crypt device sitting on device ("" if none), for an
// unstage that has no record.
func (n *Node) cryptOn(ctx context.Context, device string) (string, error) {
	if n.crypt == nil {
		return "", nil
	}
	active, err := n.crypt.Active(ctx)
	if err != nil {
		return "", err
	}
	for _, m := range active {
		if m.Backing == device {
			return m.Name, nil
		}
	}
	return "", nil
}

// CloseStaleCrypt closes the dm-crypt devices of ours that no record
// names: what a crash between open and record, or a lost state directory,
// left. Devices still in use stay (Close reports them busy) and are named
// in the log.
func (n *Node) CloseStaleCrypt(ctx context.Context) error {
	if n.crypt == nil {
		return nil
	}
	active, err := n.crypt.Active(ctx)
	if err != nil || len(active) == 0 {
		return err
	}
	recs, err := n.store.all()
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, r := range recs {
		known[luks.Name(r.VolumeID)] = true
	}
	var errs []error
	for _, m := range active {
		if known[m.Name] {
			continue
		}
		klog.InfoS("closing a dm-crypt device no volume record names", "name", m.Name, "backing", m.Backing)
		errs = append(errs, n.crypt.Close(ctx, m.Name))
	}
	return errors.Join(errs...)
}

// dataDevice is the device the volume's data is read through: the
// dm-crypt device of an encrypted volume, else the mapped one.
func (r *record) dataDevice() string {
	if r.Crypt != "" {
		return "/dev/mapper/" + r.Crypt
	}
	return r.Device
}
