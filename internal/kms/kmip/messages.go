package kmip

import (
	"github.com/gemalto/kmip-go/kmip14"
	"github.com/gemalto/kmip-go/ttlv"
)

// The KMIP 1.4 messages this client sends and reads, as structs that
// kmip-go's ttlv package encodes: its field names are the KMIP tags.
// Fields are in the order of the specification, which servers read in
// order. Response fields this client does not need are left out (ttlv
// skips them).

// The protocol version of every request: 1.4, the first version whose
// Encrypt and Decrypt carry AES-GCM's additional data and tag. A server
// that answers with an older version would not have bound the additional
// data, so such an answer is refused.
const (
	protocolMajor = 1
	protocolMinor = 4
)

type protocolVersion struct {
	ProtocolVersionMajor int
	ProtocolVersionMinor int
}

type requestMessage struct {
	TTLVTag       struct{} `ttlv:"RequestMessage"`
	RequestHeader requestHeader
	BatchItem     requestBatchItem
}

type requestHeader struct {
	ProtocolVersion protocolVersion
	BatchCount      int
}

type requestBatchItem struct {
	Operation      kmip14.Operation
	RequestPayload any
}

type responseMessage struct {
	ResponseHeader responseHeader
	BatchItem      []responseBatchItem
}

type responseHeader struct {
	ProtocolVersion protocolVersion
	BatchCount      int
}

type responseBatchItem struct {
	Operation       kmip14.Operation
	ResultStatus    kmip14.ResultStatus
	ResultReason    kmip14.ResultReason
	ResultMessage   string
	ResponsePayload ttlv.TTLV
}

// Create (KMIP 1.4, 4.1) of a symmetric key, its attributes in a template.
type createRequest struct {
	ObjectType        kmip14.ObjectType
	TemplateAttribute templateAttribute
}

type templateAttribute struct {
	Attribute []attribute
}

type attribute struct {
	AttributeName  string
	AttributeValue any
}

type createResponse struct {
	ObjectType       kmip14.ObjectType
	UniqueIdentifier string
}

// Activate (4.19).
type activateRequest struct {
	UniqueIdentifier string
}

type activateResponse struct {
	UniqueIdentifier string
}

// cryptographicParameters (2.1.5) of AES-GCM.
type cryptographicParameters struct {
	BlockCipherMode        kmip14.BlockCipherMode
	CryptographicAlgorithm kmip14.CryptographicAlgorithm
	TagLength              int
}

// Encrypt (4.29) and Decrypt (4.30), one shot (no streaming).
type encryptRequest struct {
	UniqueIdentifier                      string
	CryptographicParameters               cryptographicParameters
	Data                                  []byte
	IVCounterNonce                        []byte
	AuthenticatedEncryptionAdditionalData []byte
}

type encryptResponse struct {
	UniqueIdentifier           string
	Data                       []byte
	IVCounterNonce             []byte
	AuthenticatedEncryptionTag []byte
}

type decryptRequest struct {
	UniqueIdentifier                      string
	CryptographicParameters               cryptographicParameters
	Data                                  []byte
	IVCounterNonce                        []byte
	AuthenticatedEncryptionAdditionalData []byte
	AuthenticatedEncryptionTag            []byte
}

type decryptResponse struct {
	UniqueIdentifier string
	Data             []byte
}
