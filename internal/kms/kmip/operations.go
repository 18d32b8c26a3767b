package kmip

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/gemalto/kmip-go/kmip14"
)

// GCM's sizes: the nonce the caller draws and the tag the server makes.
// A shorter tag is refused in both directions: a server may accept a
// truncated one at Decrypt (PyKMIP does), which would weaken the check.
const (
	NonceSize = 12
	TagSize   = 16
)

// gcm is AES-GCM with a full tag.
func gcm() cryptographicParameters {
	return cryptographicParameters{
		BlockCipherMode:        kmip14.BlockCipherModeGCM,
		CryptographicAlgorithm: kmip14.CryptographicAlgorithmAES,
		TagLength:              TagSize,
	}
}

// CreateAES256 makes an AES-256 key usable for Encrypt and Decrypt and
// returns its unique identifier. The key is in state Pre-Active until
// Activate. The driver itself never creates keys: the admin does, with
// the KMS's own tools; tests use this.
func (c *Client) CreateAES256(ctx context.Context) (string, error) {
	req := createRequest{
		ObjectType: kmip14.ObjectTypeSymmetricKey,
		TemplateAttribute: templateAttribute{Attribute: []attribute{
			{AttributeName: "Cryptographic Algorithm", AttributeValue: kmip14.CryptographicAlgorithmAES},
			{AttributeName: "Cryptographic Length", AttributeValue: 256},
			{AttributeName: "Cryptographic Usage Mask", AttributeValue: kmip14.CryptographicUsageMaskEncrypt | kmip14.CryptographicUsageMaskDecrypt},
		}},
	}
	var resp createResponse
	if err := c.do(ctx, kmip14.OperationCreate, req, &resp); err != nil {
		return "", err
	}
	if resp.UniqueIdentifier == "" {
		return "", errors.New("KMIP Create: the response names no key")
	}
	return resp.UniqueIdentifier, nil
}

// Activate moves key id to state Active, in which it encrypts and
// decrypts.
func (c *Client) Activate(ctx context.Context, id string) error {
	var resp activateResponse
	if err := c.do(ctx, kmip14.OperationActivate, activateRequest{UniqueIdentifier: id}, &resp); err != nil {
		return err
	}
	if resp.UniqueIdentifier != id {
		return fmt.Errorf("KMIP Activate of key %.70q: the response names key %.70q", id, resp.UniqueIdentifier)
	}
	return nil
}

// Encrypt seals plaintext with AES-GCM under key id, in the server, with
// the caller's nonce (NonceSize random bytes, never reused with the key)
// and additional data aad, which the tag covers but the ciphertext does
// not hold. It returns the ciphertext and the tag.
func (c *Client) Encrypt(ctx context.Context, id string, plaintext, nonce, aad []byte) (ciphertext, tag []byte, err error) {
	if len(nonce) != NonceSize {
		return nil, nil, fmt.Errorf("an AES-GCM nonce has %d bytes, not %d", len(nonce), NonceSize)
	}
	req := encryptRequest{
		UniqueIdentifier:                      id,
		CryptographicParameters:               gcm(),
		Data:                                  plaintext,
		IVCounterNonce:                        nonce,
		AuthenticatedEncryptionAdditionalData: aad,
	}
	var resp encryptResponse
	if err := c.do(ctx, kmip14.OperationEncrypt, req, &resp); err != nil {
		return nil, nil, err
	}
	switch {
	case resp.UniqueIdentifier != id:
		return nil, nil, fmt.Errorf("KMIP Encrypt under key %.70q: the response names key %.70q", id, resp.UniqueIdentifier)
	case len(resp.Data) != len(plaintext):
		return nil, nil, fmt.Errorf("KMIP Encrypt under key %.70q: %d bytes of ciphertext for %d of plaintext; not AES-GCM", id, len(resp.Data), len(plaintext))
	case len(resp.AuthenticatedEncryptionTag) != TagSize:
		return nil, nil, fmt.Errorf("KMIP Encrypt under key %.70q: a tag of %d bytes, not %d", id, len(resp.AuthenticatedEncryptionTag), TagSize)
	case resp.IVCounterNonce != nil && !bytes.Equal(resp.IVCounterNonce, nonce):
		return nil, nil, fmt.Errorf("KMIP Encrypt under key %.70q: the server used another nonce", id)
	}
	return resp.Data, resp.AuthenticatedEncryptionTag, nil
}

// Decrypt opens what Encrypt sealed. A wrong key, nonce, additional data
// or tag makes the server fail the operation (a ResultError; KMIP has no
// reason of its own for a tag that does not verify).
func (c *Client) Decrypt(ctx context.Context, id string, ciphertext, nonce, aad, tag []byte) ([]byte, error) {
	if len(nonce) != NonceSize || len(tag) != TagSize {
		return nil, fmt.Errorf("AES-GCM wants a nonce of %d bytes and a tag of %d (have %d and %d)", NonceSize, TagSize, len(nonce), len(tag))
	}
	req := decryptRequest{
		UniqueIdentifier:                      id,
		CryptographicParameters:               gcm(),
		Data:                                  ciphertext,
		IVCounterNonce:                        nonce,
		AuthenticatedEncryptionAdditionalData: aad,
		AuthenticatedEncryptionTag:            tag,
	}
	var resp decryptResponse
	if err := c.do(ctx, kmip14.OperationDecrypt, req, &resp); err != nil {
		return nil, err
	}
	if resp.UniqueIdentifier != id {
		clear(resp.Data)
		return nil, fmt.Errorf("KMIP Decrypt under key %.70q: the response names key %.70q", id, resp.UniqueIdentifier)
	}
	if len(resp.Data) != len(ciphertext) {
		clear(resp.Data)
		return nil, fmt.Errorf("KMIP Decrypt under key %.70q: %d bytes of plaintext for %d of ciphertext; not AES-GCM", id, len(resp.Data), len(ciphertext))
	}
	return resp.Data, nil
}
