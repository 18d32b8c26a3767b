package kmip

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gemalto/kmip-go/kmip14"
)

// ErrUnavailable: the server could not be reached or did not answer in
// time (refused, reset, timed out, the call's deadline passed). Retrying
// later may succeed; callers answer Unavailable.
var ErrUnavailable = errors.New("the KMIP server is unavailable")

// ErrTLS: the server was reached but the TLS handshake failed: its
// certificate is not signed by the configured CA or does not carry the
// expected name, or it refused the client's certificate. Retrying does
// not help until the certificates are fixed.
var ErrTLS = errors.New("TLS with the KMIP server failed")

// ResultError is a KMIP operation the server answered with a failure.
// Message is the server's own text, cut short.
type ResultError struct {
	Operation kmip14.Operation
	Status    kmip14.ResultStatus
	Reason    kmip14.ResultReason
	Message   string
}

func (e *ResultError) Error() string {
	return fmt.Sprintf("KMIP %s: %s, %s: %.200q", e.Operation, e.Status, e.Reason, e.Message)
}

// HasReason tells whether err is a ResultError with one of reasons.
func HasReason(err error, reasons ...kmip14.ResultReason) bool {
	var re *ResultError
	if !errors.As(err, &re) {
		return false
	}
	for _, r := range reasons {
		if re.Reason == r {
			return true
		}
	}
	return false
}

// transportError sorts a failure to dial, shake hands, write or read:
// certificate trouble is ErrTLS, everything else about the connection is
// ErrUnavailable. The cause is kept: it names addresses and TLS alerts,
// never request or response bytes.
func transportError(ctx context.Context, what string, err error) error {
	var verify *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var alert tls.AlertError
	var record tls.RecordHeaderError
	var op *net.OpError
	switch {
	case errors.As(err, &verify), errors.As(err, &unknownCA), errors.As(err, &hostname),
		errors.As(err, &invalid), errors.As(err, &alert),
		// Something that does not speak TLS answers at the endpoint.
		errors.As(err, &record),
		// A TLS alert from the server (it refused our certificate) is a
		// net.OpError "remote error" around an unexported alert type.
		errors.As(err, &op) && op.Op == "remote error":
		return fmt.Errorf("%w: %s: %w", ErrTLS, what, err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, ctx.Err())
	}
	// The connection's deadline is the context's and may fire first.
	var ne net.Error
	if dl, ok := ctx.Deadline(); ok && errors.As(err, &ne) && ne.Timeout() && !time.Now().Before(dl) {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, context.DeadlineExceeded)
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
}
