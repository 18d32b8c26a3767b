package kms

import (
	"errors"
	"fmt"
)

// Image metadata keys of an encrypted volume. The controller writes the
// first three at CreateVolume (state prepared), the node moves the state
// on and adds MetaHeader once the LUKS header is written, and a KEK
// rotation rewrites MetaDEK only.
const (
	MetaKMS    = "rbdcsi.crypt.kms"
	MetaDEK    = "rbdcsi.crypt.dek"
	MetaState  = "rbdcsi.crypt.state"
	MetaHeader = "rbdcsi.crypt.header"
)

// State is where an encrypted volume's LUKS format stands.
type State string

const (
	// StatePrepared: the DEK exists; the device may hold nothing yet, or a
	// LUKS header a crash kept the node from recording. The node formats
	// only a device that holds no signature at all.
	StatePrepared State = "prepared"
	// StateFormatted: the LUKS header is written; the node only opens.
	StateFormatted State = "formatted"
)

// VolumeKey is an encrypted volume's record in its image's metadata.
type VolumeKey struct {
	KMSID string
	DEK   Wrapped
	State State
	// Header binds the LUKS header the node wrote or first opened to the
	// DEK; empty until then, and on volumes made before the binding.
	Header HeaderMAC
}

// Metadata is the record as image metadata (MetaHeader only when set).
func (k VolumeKey) Metadata() map[string]string {
	md := map[string]string{MetaKMS: k.KMSID, MetaDEK: string(k.DEK), MetaState: string(k.State)}
	if k.Header != "" {
		md[MetaHeader] = string(k.Header)
	}
	return md
}

// ErrBadRecord: an image's encryption metadata is incomplete or malformed.
var ErrBadRecord = errors.New("encryption metadata is incomplete or malformed")

// ReadVolumeKey reads the record from image metadata: ok false when the
// image carries none (a plain volume), an error when it carries part of
// one, which no step of the driver leaves behind.
func ReadVolumeKey(md map[string]string) (k VolumeKey, ok bool, err error) {
	kmsID, hasKMS := md[MetaKMS]
	dek, hasDEK := md[MetaDEK]
	state, hasState := md[MetaState]
	header, hasHeader := md[MetaHeader]
	if !hasKMS && !hasDEK && !hasState && !hasHeader {
		return VolumeKey{}, false, nil
	}
	k = VolumeKey{KMSID: kmsID, DEK: Wrapped(dek), State: State(state), Header: HeaderMAC(header)}
	switch {
	case ValidKEKID(kmsID) != nil:
		return k, true, fmt.Errorf("%w: KMS ID %.70q", ErrBadRecord, kmsID)
	case k.DEK.KEKID() == "":
		return k, true, fmt.Errorf("%w: no wrapped data key", ErrBadRecord)
	case k.State != StatePrepared && k.State != StateFormatted:
		return k, true, fmt.Errorf("%w: state %.30q", ErrBadRecord, state)
	}
	if hasHeader {
		// Missing is allowed: volumes formatted before the binding.
		if _, err := k.Header.decode(); err != nil {
			return k, true, fmt.Errorf("%w: %v", ErrBadRecord, err)
		}
	}
	return k, true, nil
}
