package manifests

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"sync"
	"testing"
	"time"
)

// servingCertNames are the names of deploy/snapshot-metadata's Service
// that its certificate must hold: backup tools dial the first.
var servingCertNames = []string{"rbdcsi-snapshot-metadata.rbdcsi", "rbdcsi-snapshot-metadata.rbdcsi.svc"}

var servingCert = sync.OnceValues(makeServingCert)

// testServingCert is the certificate the tests give deploy/snapshot-metadata,
// as a site makes it (docs/backup.md): tls.crt and tls.key, for the
// Service's names, ca.crt, the CA that signed it, and ca.crt.base64, the
// CA as one line of base64. Made once per run.
func testServingCert(t *testing.T) map[string]string {
	t.Helper()
	files, err := servingCert()
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func makeServingCert() (map[string]string, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rbdcsi test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: servingCertNames[0]}, DNSNames: servingCertNames,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	encode := func(typ string, der []byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
	}
	caPEM := encode("CERTIFICATE", caDER)
	return map[string]string{
		"ca.crt":        caPEM,
		"ca.crt.base64": base64.StdEncoding.EncodeToString([]byte(caPEM)),
		"tls.crt":       encode("CERTIFICATE", leafDER),
		"tls.key":       encode("EC PRIVATE KEY", keyDER),
	}, nil
}

// checkServingCert: crt and key are a pair, and crt is a server
// certificate for host and host.svc (a Service's names, host being
// <service>.<namespace>) signed by a CA of caPEM, as backup tools check it.
func checkServingCert(t *testing.T, what string, crt, key, caPEM []byte, host string) {
	t.Helper()
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Errorf("%s: tls.crt and tls.key: %v", what, err)
		return
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Errorf("%s: tls.crt: %v", what, err)
		return
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Errorf("%s: the CA holds no PEM certificate", what)
		return
	}
	for _, name := range []string{host, host + ".svc"} {
		chains, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots})
		if err != nil {
			t.Errorf("%s: the certificate does not serve %s under the CA: %v", what, name, err)
		} else if len(chains[0]) < 2 {
			t.Errorf("%s: the CA is the certificate itself, not the CA that signed it", what)
		}
	}
}
