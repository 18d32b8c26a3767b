package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Encrypted volumes. The controller's part is the volume key record in
// the image's metadata (kms.VolumeKey): at CreateVolume it draws a data
// encryption key (DEK), wraps it with the current key encryption key
// (KEK) of the StorageClass's KMS and stores it, state prepared, with the
// image's other metadata, before the marker (records.VolumeMarker): a crash leaves an
// unfinished image that the retry replaces, never a finished one without
// its key. The node unwraps the DEK, writes the LUKS2 header and records
// state formatted. The DEK never leaves the controller's memory unwrapped.
//
// Secrets: KEKs come in the request's secrets (the provisioner Secret
// for CreateVolume: the tenant's KEK Secret, which holds no Ceph key). No error or log line shows a KEK or a DEK; the kms
// package's errors name keys, never their values.

// provisionerSecretHint says where CreateVolume's KEKs come from.
const provisionerSecretHint = "the StorageClass's provisioner Secret (csi.storage.k8s.io/provisioner-secret-name)"

// checkEncryption refuses, before anything is made, an encrypted class
// this controller cannot serve: no KMS configuration, a KMS ID the
// configuration lacks, or several writing nodes.
func (c *Controller) checkEncryption(enc config.Encryption, caps []*csi.VolumeCapability) error {
	if !enc.Enabled {
		return nil
	}
	if c.opts.KMS == nil {
		return status.Errorf(codes.InvalidArgument, "the StorageClass asks for encryption (%s %q), and this driver has no KMS configuration: start its controller with --kms-config naming KMS %s",
			config.ParamEncryptionKMSID, enc.KMSID, enc.KMSID)
	}
	if _, ok := c.opts.KMS[enc.KMSID]; !ok {
		return status.Errorf(codes.InvalidArgument, "parameter %s: %v; fix the StorageClass or add the KMS to --kms-config",
			config.ParamEncryptionKMSID, unknownKMS(c.opts.KMS, enc.KMSID))
	}
	// A new encrypted volume gets its LUKS header from the first node that
	// stages it. Two nodes staging it at once would each write a header of
	// their own, with LUKS volume keys of their own: one node's writes
	// would be garbage to the other. Only single-writer modes are safe.
	for _, cap := range caps {
		switch mode := cap.GetAccessMode().GetMode(); mode {
		case csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER:
			return status.Errorf(codes.InvalidArgument, "access mode %s: an encrypted volume can be written by one node only (its LUKS header is written by the first node that stages it); use ReadWriteOnce or ReadWriteOncePod, or a class without %s", mode, config.ParamEncrypted)
		}
	}
	return nil
}

// unknownKMS is kms.ErrUnknownKMS's message, for a check made without
// opening the KMS.
func unknownKMS(cfg kms.Config, id string) error {
	return fmt.Errorf("%w %.70q (configured: %s)", kms.ErrUnknownKMS, id, strings.Join(slices.Sorted(maps.Keys(cfg)), ", "))
}

// binding is what the DEK of image in pool is bound to (kms.Binding).
func binding(kmsID string, pool rbd.Pool, image string) kms.Binding {
	return kms.Binding{KMSID: kmsID, Pool: pool.Name, Namespace: pool.Namespace, Image: image}
}

// newVolumeKey draws a DEK for the new volume name, image in pool, and
// wraps it with the current KEK of the class's KMS, bound to the image:
// the image metadata of its key record, state prepared.
func (c *Controller) newVolumeKey(ctx context.Context, pool rbd.Pool, image, name string, enc config.Encryption, secrets map[string]string) (map[string]string, error) {
	keys, err := c.openKMS(enc.KMSID, secrets, true)
	if err != nil {
		return nil, status.Errorf(status.Code(err), "volume %s: %s", name, status.Convert(err).Message())
	}
	dek, err := kms.NewDEK()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "volume %s: %v", name, err)
	}
	defer clear(dek)
	wrapped, err := keys.Wrap(ctx, dek, binding(enc.KMSID, pool, image))
	if err != nil {
		return nil, wrapStatus(name, enc.KMSID, err)
	}
	return kms.VolumeKey{KMSID: enc.KMSID, DEK: wrapped, State: kms.StatePrepared}.Metadata(), nil
}

// childVolumeKey is the key record of a restore or clone of an image
// parentVol in parentPool (what names the source for messages), for the
// new volume name, image in pool.
//
// The child shares the parent's data, LUKS header included, copy-on-write:
// it needs the parent's DEK, which is unwrapped with the parent's KMS and
// wrapped again with the current KEK of the child's class (another KMS
// maybe), bound to the child's image. Both must be in the request's
// secrets. The parent's DEK is bound to the image the parent was created
// as, which a hidden image still names (records.Names.OriginalImage).
//
// The child's state is always prepared, whatever the parent's: the
// parent's record tells how the parent stands now, not how it stood when
// the snapshot was taken, and a snapshot taken before the parent's first
// stage holds no LUKS header. In state prepared the node opens the LUKS
// header it finds and records formatted, and formats only a device that
// holds no signature at all, so prepared is right for both cases, while
// formatted would leave a child without a header unusable.
//
// encrypted -> plain and plain -> encrypted are refused: a plain class
// would hand the node ciphertext to mount, and a plain parent's data
// cannot become encrypted in place.
func (c *Controller) childVolumeKey(ctx context.Context, parentPool rbd.Pool, parentVol records.Volume, what string, pool rbd.Pool, image, name string, enc config.Encryption, secrets map[string]string) (map[string]string, error) {
	parent, encrypted, err := parentVol.Key()
	if err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%s cannot be restored or cloned: %v", what, err)
	}
	switch {
	case encrypted && !enc.Enabled:
		return nil, status.Errorf(codes.InvalidArgument, "%s is encrypted (KMS %s); a volume made from it shares its encrypted data and must be encrypted too: use a StorageClass with %s: \"true\" (any %s)",
			what, parent.KMSID, config.ParamEncrypted, config.ParamEncryptionKMSID)
	case !encrypted && enc.Enabled:
		return nil, status.Errorf(codes.InvalidArgument, "%s is not encrypted; a volume made from it shares its plain data, which cannot be encrypted in place: restore or clone it with a StorageClass without %s, or copy its data into a new encrypted volume",
			what, config.ParamEncrypted)
	case !encrypted:
		return nil, nil
	}
	from, err := c.openKMS(parent.KMSID, secrets, false)
	if err != nil {
		return nil, status.Errorf(status.Code(err), "%s is encrypted with KMS %s: %s", what, parent.KMSID, status.Convert(err).Message())
	}
	dek, err := from.Unwrap(ctx, parent.DEK, binding(parent.KMSID, parentPool, c.names.OriginalImage(parentVol)))
	if err != nil {
		switch {
		case errors.Is(err, kms.ErrUnavailable):
			return nil, status.Errorf(codes.Unavailable, "%s: unwrapping its data key: %v", what, err)
		case errors.Is(err, kms.ErrMissingKEK):
			return nil, status.Errorf(codes.FailedPrecondition, "%s is encrypted with KMS %s, whose key encryption keys must be in %s as well as those of the new volume's KMS %s: %v",
				what, parent.KMSID, provisionerSecretHint, enc.KMSID, err)
		case errors.Is(err, kms.ErrWrongKEK):
			return nil, status.Errorf(codes.FailedPrecondition, "%s is encrypted with KMS %s, and its key record does not open: %v; check its image's %s against the KEKs in %s",
				what, parent.KMSID, err, kms.MetaDEK, provisionerSecretHint)
		}
		return nil, status.Errorf(codes.FailedPrecondition, "%s: unwrapping its data key: %v", what, err)
	}
	defer clear(dek)
	to := from
	if enc.KMSID != parent.KMSID {
		if to, err = c.openKMS(enc.KMSID, secrets, true); err != nil {
			return nil, status.Errorf(status.Code(err), "volume %s: %s", name, status.Convert(err).Message())
		}
	}
	wrapped, err := to.Wrap(ctx, dek, binding(enc.KMSID, pool, image))
	if err != nil {
		return nil, wrapStatus(name, enc.KMSID, err)
	}
	return kms.VolumeKey{KMSID: enc.KMSID, DEK: wrapped, State: kms.StatePrepared}.Metadata(), nil
}

// openKMS opens a KMS with the request's secrets. An unknown KMS is the
// request's fault when the class names it (classKMS), else a state the
// admin must fix (a source's KMS dropped from the configuration).
func (c *Controller) openKMS(id string, secrets map[string]string, classKMS bool) (kms.Keys, error) {
	if c.opts.KMS == nil {
		code := codes.FailedPrecondition
		if classKMS {
			code = codes.InvalidArgument
		}
		return nil, status.Errorf(code, "this driver has no KMS configuration: start its controller with --kms-config naming KMS %s", id)
	}
	if c.opts.AllowKEKsWithCredentials {
		secrets = kms.WithoutCredentials(secrets)
	}
	keys, err := c.opts.KMS.Open(id, secrets)
	switch {
	case err == nil:
		return keys, nil
	case errors.Is(err, kms.ErrUnknownKMS) && classKMS:
		return nil, status.Errorf(codes.InvalidArgument, "parameter %s: %v", config.ParamEncryptionKMSID, err)
	case errors.Is(err, kms.ErrUnknownKMS):
		return nil, status.Errorf(codes.FailedPrecondition, "%v: add it to --kms-config again", err)
	default:
		// The secret's keys are malformed or ambiguous: fixed in the Secret.
		return nil, status.Errorf(codes.FailedPrecondition, "%v (in %s)", err, provisionerSecretHint)
	}
}

// wrapStatus answers a failed wrap for the new volume name: a KMS that
// cannot be reached now is Unavailable, which the provisioner retries.
func wrapStatus(name, kmsID string, err error) error {
	if errors.Is(err, kms.ErrUnavailable) {
		return status.Errorf(codes.Unavailable, "volume %s: wrapping its data key: %v", name, err)
	}
	if errors.Is(err, kms.ErrMissingKEK) {
		return status.Errorf(codes.FailedPrecondition, "volume %s: %v; the key encryption keys of KMS %s must be in %s",
			name, err, kmsID, provisionerSecretHint)
	}
	return status.Errorf(codes.Internal, "volume %s: wrapping its data key: %v", name, err)
}

// sameEncryption squares a finished volume a retry finds with the
// request: encrypted or not, and by which KMS. Anything else is another
// volume under the same name.
func sameEncryption(v records.Volume, enc config.Encryption, name string) error {
	key, encrypted, err := v.Key()
	switch {
	case err != nil:
		return status.Errorf(codes.FailedPrecondition, "volume %s already exists, and its %v", name, err)
	case encrypted && !enc.Enabled:
		return status.Errorf(codes.AlreadyExists, "volume %s already exists encrypted (KMS %s); the request is for a volume without encryption", name, key.KMSID)
	case !encrypted && enc.Enabled:
		return status.Errorf(codes.AlreadyExists, "volume %s already exists without encryption; the request is for an encrypted one (KMS %s)", name, enc.KMSID)
	case encrypted && key.KMSID != enc.KMSID:
		return status.Errorf(codes.AlreadyExists, "volume %s already exists encrypted with KMS %s; the request names KMS %s", name, key.KMSID, enc.KMSID)
	}
	return nil
}

// contextEncryptionMismatch says why a volume context does not fit the
// image's encryption, or "". An empty context says nothing (callers need
// not send one); any other must agree with the image: a context without
// encryption for an encrypted image would have the node use the
// ciphertext as the volume (and a raw block user overwrite the LUKS
// header), and one with encryption for a plain image cannot be served.
func contextEncryptionMismatch(volCtx map[string]string, v records.Volume) string {
	if len(volCtx) == 0 {
		return ""
	}
	key, encrypted, err := v.Key()
	wants := volCtx[config.ParamEncrypted] == "true"
	switch {
	case err != nil:
		return err.Error()
	case encrypted && !wants:
		return fmt.Sprintf("the image is encrypted (KMS %s), and the volume context lacks %s: \"true\"; set volumeAttributes %s: \"true\" and %s: %q",
			key.KMSID, config.ParamEncrypted, config.ParamEncrypted, config.ParamEncryptionKMSID, key.KMSID)
	case !encrypted && wants:
		return fmt.Sprintf("the volume context says %s: \"true\", and the image holds no encryption key record: this driver encrypts only the volumes it creates; remove %s from the volumeAttributes",
			config.ParamEncrypted, config.ParamEncrypted)
	case encrypted && volCtx[config.ParamEncryptionKMSID] != key.KMSID:
		return fmt.Sprintf("the image's data key is wrapped by KMS %s, and the volume context names %s %.70q; make them agree",
			key.KMSID, config.ParamEncryptionKMSID, volCtx[config.ParamEncryptionKMSID])
	}
	return ""
}
