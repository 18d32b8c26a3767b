// Package kmip is a small client of a KMIP server (OASIS KMIP 1.4 over
// TLS with client certificates): just what the driver's KMS needs, which
// is AES-256-GCM Encrypt and Decrypt under a key that stays in the
// server, and Create and Activate to make such keys. The messages are
// encoded with kmip-go's ttlv package; kmip-go has no client of its own.
//
// Each operation is one TLS connection, one request and one response,
// bounded by the call's context and by Timeout: nothing is kept open
// between calls, so a client needs no closing.
package kmip

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/gemalto/kmip-go/kmip14"
	"github.com/gemalto/kmip-go/ttlv"
)

// DefaultPort is the port IANA assigns to KMIP over TLS.
const DefaultPort = "5696"

// Timeout bounds one operation (connect, handshake, request, response)
// when the call's context allows longer or has no deadline: a server that
// accepts and then hangs must not hold a CSI call or a rotation pass.
const Timeout = 15 * time.Second

// maxResponse bounds what a response may claim to hold before anything
// is allocated; the responses read here are a few hundred bytes.
const maxResponse = 64 << 10

// Config says where the server is and how the client proves itself.
type Config struct {
	// Endpoint is host:port (the port defaults to 5696).
	Endpoint string
	// ServerName is the name the server's certificate must carry;
	// empty: the endpoint's host.
	ServerName string
	// CA is PEM: the certificates that may sign the server's. The
	// system's roots are never used: a KMS is the admin's own.
	CA []byte
	// ClientCert and ClientKey are PEM: the client's certificate (with
	// any intermediates) and its private key.
	ClientCert, ClientKey []byte
}

// Client talks to one KMIP server.
type Client struct {
	endpoint string
	tls      *tls.Config
}

// New checks c and returns a client; it connects to nothing. Errors name
// what is wrong, never PEM content.
func New(c Config) (*Client, error) {
	endpoint, host, err := SplitEndpoint(c.Endpoint)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if len(c.CA) == 0 || !roots.AppendCertsFromPEM(c.CA) {
		return nil, errors.New("the KMIP server's CA holds no PEM certificate")
	}
	if len(c.ClientCert) == 0 || len(c.ClientKey) == 0 {
		return nil, errors.New("a KMIP client needs a client certificate and its key")
	}
	pair, err := tls.X509KeyPair(c.ClientCert, c.ClientKey)
	if err != nil {
		// crypto/tls names PEM block types and mismatches, not content.
		return nil, fmt.Errorf("the KMIP client certificate and key: %w", err)
	}
	name := c.ServerName
	if name == "" {
		name = host
	}
	return &Client{endpoint: endpoint, tls: &tls.Config{
		MinVersion:   tls.VersionTLS12,
		RootCAs:      roots,
		Certificates: []tls.Certificate{pair},
		ServerName:   name,
	}}, nil
}

// SplitEndpoint checks a host[:port] endpoint and returns it with its
// port (5696 if none) and its host.
func SplitEndpoint(endpoint string) (hostPort, host string, err error) {
	h, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		// No port: the whole is the host (an IPv6 literal in brackets
		// has its brackets dropped).
		h, port = endpoint, DefaultPort
		if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
			h = h[1 : len(h)-1]
		}
	}
	if n, perr := strconv.Atoi(port); perr != nil || n < 1 || n > 65535 {
		return "", "", fmt.Errorf("KMIP endpoint %.100q: want host:port", endpoint)
	}
	if h == "" || len(h) > 253 {
		return "", "", fmt.Errorf("KMIP endpoint %.100q: want host:port", endpoint)
	}
	for _, r := range h {
		if r <= ' ' || r == '/' || r == '@' || r > '~' {
			return "", "", fmt.Errorf("KMIP endpoint %.100q: want host:port", endpoint)
		}
	}
	return net.JoinHostPort(h, port), h, nil
}

// do sends one request for op with payload req and decodes the success
// response's payload into resp.
func (c *Client) do(ctx context.Context, op kmip14.Operation, req, resp any) error {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	msg, err := ttlv.Marshal(requestMessage{
		RequestHeader: requestHeader{
			ProtocolVersion: protocolVersion{protocolMajor, protocolMinor},
			BatchCount:      1,
		},
		BatchItem: requestBatchItem{Operation: op, RequestPayload: req},
	})
	if err != nil {
		return fmt.Errorf("encoding a KMIP %s request: %w", op, err)
	}
	// The request may hold a data key in the clear.
	defer clear(msg)
	raw, err := c.exchange(ctx, op, msg)
	defer clear(raw)
	if err != nil {
		return err
	}
	var rm responseMessage
	if err := ttlv.Unmarshal(raw, &rm); err != nil {
		// ttlv's errors may quote values, which can be key material.
		return fmt.Errorf("KMIP %s: malformed response message", op)
	}
	if len(rm.BatchItem) != 1 {
		return fmt.Errorf("KMIP %s: the response holds %d batch items, not 1", op, len(rm.BatchItem))
	}
	item := rm.BatchItem[0]
	if item.ResultStatus != kmip14.ResultStatusSuccess {
		return &ResultError{Operation: op, Status: item.ResultStatus, Reason: item.ResultReason, Message: item.ResultMessage}
	}
	if v := rm.ResponseHeader.ProtocolVersion; v.ProtocolVersionMajor != protocolMajor || v.ProtocolVersionMinor < protocolMinor {
		return fmt.Errorf("KMIP %s: the server answered in KMIP %d.%d; this client needs %d.%d or later", op,
			v.ProtocolVersionMajor, v.ProtocolVersionMinor, protocolMajor, protocolMinor)
	}
	if item.Operation != op {
		return fmt.Errorf("KMIP %s: the response is for operation %s", op, item.Operation)
	}
	// resp's byte fields alias the buffer they are decoded from: a copy
	// of the payload of its own, so that clearing raw leaves them whole.
	if err := ttlv.Unmarshal(bytes.Clone(item.ResponsePayload), resp); err != nil {
		return fmt.Errorf("KMIP %s: malformed response payload", op)
	}
	return nil
}

// exchange writes msg on a new connection and reads one response message.
func (c *Client) exchange(ctx context.Context, op kmip14.Operation, msg []byte) ([]byte, error) {
	d := tls.Dialer{Config: c.tls}
	conn, err := d.DialContext(ctx, "tcp", c.endpoint)
	if err != nil {
		return nil, transportError(ctx, "connecting to "+c.endpoint, err)
	}
	defer conn.Close()
	// The deadline bounds a server that stops answering; cancelling the
	// call ends a read at once.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	what := fmt.Sprintf("KMIP %s at %s", op, c.endpoint)
	if _, err := conn.Write(msg); err != nil {
		return nil, transportError(ctx, what, err)
	}
	// A TTLV header: tag (3 bytes), type (1), length (4).
	var head [8]byte
	if _, err := io.ReadFull(conn, head[:]); err != nil {
		return nil, transportError(ctx, what, err)
	}
	tag := ttlv.TTLV(head[:]).Tag()
	typ := ttlv.TTLV(head[:]).Type()
	n := binary.BigEndian.Uint32(head[4:])
	if tag != kmip14.TagResponseMessage || typ != ttlv.TypeStructure || n%8 != 0 || n > maxResponse {
		return nil, fmt.Errorf("%s: the answer is not a KMIP response message", what)
	}
	raw := make([]byte, 8+int(n))
	copy(raw, head[:])
	if _, err := io.ReadFull(conn, raw[8:]); err != nil {
		clear(raw)
		return nil, transportError(ctx, what, err)
	}
	return raw, nil
}
