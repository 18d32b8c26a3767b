// Package kmiptest runs a real KMIP server for tests: PyKMIP's server
// (Debian's python3-pykmip), with a CA, server and client certificates
// made for the test, in the test's temporary directory, on 127.0.0.1.
package kmiptest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"
)

// PKI is a CA that signs a KMIP server's and its clients' certificates.
// Keys are ECDSA P-256: PyKMIP's TLS 1.2 suite offers AES-GCM only with
// ECDSA certificates, and Go offers no other suite PyKMIP has.
type PKI struct {
	// CA is the CA certificate, PEM.
	CA     []byte
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

// NewPKI makes a CA.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "rbdcsi test KMIP CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &PKI{CA: pemBlock("CERTIFICATE", der), caCert: cert, caKey: key}
}

// Client makes a client certificate for identity cn (PyKMIP's owner of
// the keys a client creates is its certificate's common name). It
// returns the certificate and key, PEM.
func (p *PKI) Client(t testing.TB, cn string) (cert, key []byte) {
	t.Helper()
	return p.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// Server makes a server certificate for 127.0.0.1 and localhost.
func (p *PKI) Server(t testing.TB) (cert, key []byte) {
	t.Helper()
	return p.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

func (p *PKI) issue(t testing.TB, tmpl *x509.Certificate) (cert, key []byte) {
	t.Helper()
	k := newKey(t)
	tmpl.SerialNumber = serial(t)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &k.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", kder)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
