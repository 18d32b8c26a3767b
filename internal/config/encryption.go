package config

import (
	"fmt"
	"regexp"
)

// StorageClass parameters of encrypted volumes (LUKS2 on the node, the
// data key wrapped by a KMS of the driver's KMS configuration).
const (
	// ParamEncrypted "true" makes every volume of the class encrypted.
	ParamEncrypted = "encrypted"
	// ParamEncryptionKMSID names the KMS configuration entry whose key
	// encryption keys wrap the volumes' data keys.
	ParamEncryptionKMSID = "encryptionKMSID"
	// ParamEncryptionAllowDiscards "true" passes discards through the
	// encryption layer, so that freed blocks go back to Ceph. The price:
	// anyone who reads the image sees which blocks are unused, hence the
	// filesystem type and how full it is (never the data).
	ParamEncryptionAllowDiscards = "encryptionAllowDiscards"
)

// Encryption is a volume's encryption, from its parameters or its volume
// context.
type Encryption struct {
	Enabled       bool
	KMSID         string
	AllowDiscards bool
}

var kmsIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// parseEncryption reads the encryption parameters: a KMS ID is required
// with encrypted "true" and refused without it, so a class never looks
// encrypted while it is not.
func parseEncryption(in map[string]string) (Encryption, error) {
	var e Encryption
	var err error
	if e.Enabled, err = parseBool(in, ParamEncrypted); err != nil {
		return e, err
	}
	if e.AllowDiscards, err = parseBool(in, ParamEncryptionAllowDiscards); err != nil {
		return e, err
	}
	e.KMSID = in[ParamEncryptionKMSID]
	switch {
	case e.Enabled && e.KMSID == "":
		return e, fmt.Errorf("parameter %s is required with %s \"true\": it names the KMS configuration entry whose keys wrap the volumes' data keys", ParamEncryptionKMSID, ParamEncrypted)
	case e.Enabled && !kmsIDPattern.MatchString(e.KMSID):
		return e, fmt.Errorf("parameter %s: %.70q: want 1 to 64 letters, digits, '_' or '-'", ParamEncryptionKMSID, e.KMSID)
	case !e.Enabled && (e.KMSID != "" || e.AllowDiscards):
		return e, fmt.Errorf("parameters %s and %s apply only with %s \"true\"", ParamEncryptionKMSID, ParamEncryptionAllowDiscards, ParamEncrypted)
	}
	return e, nil
}

// parseBool reads a "true"/"false" parameter; absent is false.
func parseBool(in map[string]string, key string) (bool, error) {
	switch in[key] {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	}
	return false, fmt.Errorf("parameter %s: %.30q is neither \"true\" nor \"false\"", key, in[key])
}

// context adds the encryption to a volume context.
func (e Encryption) context(ctx map[string]string) {
	if !e.Enabled {
		return
	}
	ctx[ParamEncrypted] = "true"
	ctx[ParamEncryptionKMSID] = e.KMSID
	if e.AllowDiscards {
		ctx[ParamEncryptionAllowDiscards] = "true"
	}
}
