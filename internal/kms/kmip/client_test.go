package kmip_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gemalto/kmip-go/kmip14"

	"github.com/rbdcsi/rbdcsi/internal/kms/kmip"
	"github.com/rbdcsi/rbdcsi/internal/kms/kmip/kmiptest"
)

func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

func newClient(t *testing.T, c kmip.Config) *kmip.Client {
	t.Helper()
	cl, err := kmip.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// Against PyKMIP: the server does AES-256-GCM with the additional data
// and the tag (KMIP 1.4), and a wrong key, nonce, additional data or tag
// fails in the server, giving nothing back.
func TestEncryptDecrypt(t *testing.T) {
	srv := kmiptest.Start(t)
	id, other := srv.NewKEK(t), srv.NewKEK(t)
	c := newClient(t, srv.ClientConfig())
	plain := bytes.Repeat([]byte{0x5a}, 32)
	nonce, aad := bytes.Repeat([]byte{1}, kmip.NonceSize), []byte("version, key and binding")
	ct, tag, err := c.Encrypt(ctx(t, time.Minute), id, plain, nonce, aad)
	if err != nil {
		t.Fatalf("Encrypt: %v", err)
	}
	if len(ct) != len(plain) || len(tag) != kmip.TagSize || bytes.Equal(ct, plain) {
		t.Fatalf("Encrypt = %x, tag %x", ct, tag)
	}
	got, err := c.Decrypt(ctx(t, time.Minute), id, ct, nonce, aad, tag)
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Decrypt = %x, %v", got, err)
	}
	flip := func(b []byte) []byte { b = bytes.Clone(b); b[0] ^= 1; return b }
	for what, args := range map[string]struct {
		id                  string
		ct, nonce, aad, tag []byte
	}{
		"another key":           {other, ct, nonce, aad, tag},
		"altered ciphertext":    {id, flip(ct), nonce, aad, tag},
		"another nonce":         {id, ct, flip(nonce), aad, tag},
		"other additional data": {id, ct, nonce, flip(aad), tag},
		"no additional data":    {id, ct, nonce, nil, tag},
		"altered tag":           {id, ct, nonce, aad, flip(tag)},
	} {
		got, err := c.Decrypt(ctx(t, time.Minute), args.id, args.ct, args.nonce, args.aad, args.tag)
		var re *kmip.ResultError
		if !errors.As(err, &re) || got != nil {
			t.Errorf("Decrypt with %s: %x, %v; want the server's refusal", what, got, err)
		}
	}
	// PyKMIP would accept a truncated tag; the client never sends one.
	if got, err := c.Decrypt(ctx(t, time.Minute), id, ct, nonce, aad, tag[:12]); err == nil || got != nil {
		t.Errorf("Decrypt with a 12-byte tag: %x, %v", got, err)
	}
	if _, _, err := c.Encrypt(ctx(t, time.Minute), id, plain, nonce[:8], aad); err == nil {
		t.Error("Encrypt with an 8-byte nonce succeeded")
	}
	if _, err := c.Decrypt(ctx(t, time.Minute), "404", ct, nonce, aad, tag); !kmip.HasReason(err, kmip14.ResultReasonItemNotFound) {
		t.Errorf("Decrypt under a key the server lacks: %v; want ItemNotFound", err)
	}
	// A key not yet active does not encrypt.
	inactive, err := c.CreateAES256(ctx(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Encrypt(ctx(t, time.Minute), inactive, plain, nonce, aad); !kmip.HasReason(err, kmip14.ResultReasonPermissionDenied) {
		t.Errorf("Encrypt under a pre-active key: %v; want PermissionDenied", err)
	}
	// A client of another identity does not see the key.
	cert, key := srv.PKI.Client(t, "someone-else")
	stranger := srv.ClientConfig()
	stranger.ClientCert, stranger.ClientKey = cert, key
	if _, err := newClient(t, stranger).Decrypt(ctx(t, time.Minute), id, ct, nonce, aad, tag); !kmip.HasReason(err, kmip14.ResultReasonPermissionDenied, kmip14.ResultReasonItemNotFound) {
		t.Errorf("Decrypt by another client: %v", err)
	}

	// Certificates from another CA, on either side, and a server name
	// the certificate lacks: ErrTLS, not an outage.
	other2 := kmiptest.NewPKI(t)
	cert, key = other2.Client(t, kmiptest.Identity)
	for what, change := range map[string]func(*kmip.Config){
		"client of another CA": func(c *kmip.Config) { c.ClientCert, c.ClientKey = cert, key },
		"server of another CA": func(c *kmip.Config) { c.CA = other2.CA },
		"another server name":  func(c *kmip.Config) { c.ServerName = "kms.example" },
	} {
		cfg := srv.ClientConfig()
		change(&cfg)
		_, err := newClient(t, cfg).Decrypt(ctx(t, time.Minute), id, ct, nonce, aad, tag)
		if !errors.Is(err, kmip.ErrTLS) || errors.Is(err, kmip.ErrUnavailable) {
			t.Errorf("%s: %v; want ErrTLS", what, err)
		}
	}

	// Down: ErrUnavailable, at once.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if got, err := c.Decrypt(ctx(t, time.Minute), id, ct, nonce, aad, tag); !errors.Is(err, kmip.ErrUnavailable) || got != nil {
		t.Errorf("Decrypt with the server down: %x, %v; want ErrUnavailable", got, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a refused connection took %s", d)
	}
}

// fakeServer serves TLS on 127.0.0.1 with a certificate of pki and
// answers every connection with answer.
func fakeServer(t *testing.T, pki *kmiptest.PKI, answer func(net.Conn)) string {
	t.Helper()
	cert, key := pki.Server(t)
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				answer(c)
			}()
		}
	}()
	return l.Addr().String()
}

func fakeConfig(t *testing.T, pki *kmiptest.PKI, endpoint string) kmip.Config {
	cert, key := pki.Client(t, "c")
	return kmip.Config{Endpoint: endpoint, CA: pki.CA, ClientCert: cert, ClientKey: key}
}

// What a server answers is read within bounds: a response that claims to
// be huge is refused before anything is allocated, one that is no KMIP
// is an error (not an outage), one that never comes ends at the deadline.
func TestResponsesAreBounded(t *testing.T) {
	pki := kmiptest.NewPKI(t)
	readRequest := func(c net.Conn) {
		var head [8]byte
		if _, err := io.ReadFull(c, head[:]); err == nil {
			_, _ = io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(head[4:])))
		}
	}
	huge := fakeServer(t, pki, func(c net.Conn) {
		readRequest(c)
		// A Response Message structure claiming 1 GiB.
		_, _ = c.Write([]byte{0x42, 0x00, 0x7b, 0x01, 0x40, 0x00, 0x00, 0x00})
		time.Sleep(time.Second)
	})
	junk := fakeServer(t, pki, func(c net.Conn) {
		readRequest(c)
		_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
	})
	silent := fakeServer(t, pki, func(c net.Conn) {
		readRequest(c)
		time.Sleep(5 * time.Second)
	})
	for what, ep := range map[string]string{"huge": huge, "junk": junk} {
		err := newClient(t, fakeConfig(t, pki, ep)).Activate(ctx(t, time.Minute), "1")
		if err == nil || errors.Is(err, kmip.ErrUnavailable) || !strings.Contains(err.Error(), "not a KMIP response") {
			t.Errorf("%s answer: %v", what, err)
		}
	}
	start := time.Now()
	err := newClient(t, fakeConfig(t, pki, silent)).Activate(ctx(t, 500*time.Millisecond), "1")
	if !errors.Is(err, kmip.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("no answer: %v; want ErrUnavailable after the deadline", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("no answer: returned after %s, with a deadline of 0.5s", d)
	}
	// Nothing listens.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	if err := newClient(t, fakeConfig(t, pki, closed)).Activate(ctx(t, time.Minute), "1"); !errors.Is(err, kmip.ErrUnavailable) {
		t.Errorf("nothing listening: %v; want ErrUnavailable", err)
	}
	// A plain TCP service that is no TLS server.
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	go func() {
		for {
			c, err := plain.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.2\r\n"))
			c.Close()
		}
	}()
	if err := newClient(t, fakeConfig(t, pki, plain.Addr().String())).Activate(ctx(t, time.Minute), "1"); !errors.Is(err, kmip.ErrTLS) {
		t.Errorf("a service that is not TLS: %v; want ErrTLS", err)
	}
}

func TestNew(t *testing.T) {
	pki := kmiptest.NewPKI(t)
	cert, key := pki.Client(t, "c")
	_, otherKey := pki.Client(t, "d")
	ok := kmip.Config{Endpoint: "kms.example", CA: pki.CA, ClientCert: cert, ClientKey: key}
	if _, err := kmip.New(ok); err != nil {
		t.Fatal(err)
	}
	for what, change := range map[string]func(*kmip.Config){
		"no endpoint":     func(c *kmip.Config) { c.Endpoint = "" },
		"a URL":           func(c *kmip.Config) { c.Endpoint = "https://kms.example:5696" },
		"bad port":        func(c *kmip.Config) { c.Endpoint = "kms.example:99999" },
		"no CA":           func(c *kmip.Config) { c.CA = nil },
		"CA not PEM":      func(c *kmip.Config) { c.CA = []byte("not PEM") },
		"no key":          func(c *kmip.Config) { c.ClientKey = nil },
		"another's key":   func(c *kmip.Config) { c.ClientKey = otherKey },
		"key as the cert": func(c *kmip.Config) { c.ClientCert = key },
	} {
		c := ok
		change(&c)
		_, err := kmip.New(c)
		if err == nil {
			t.Errorf("%s: accepted", what)
			continue
		}
		for _, pem := range [][]byte{key, otherKey, cert} {
			for _, line := range strings.Split(string(pem), "\n") {
				if len(line) > 20 && strings.Contains(err.Error(), line) {
					t.Errorf("%s: the error shows PEM: %v", what, err)
				}
			}
		}
	}
	for in, want := range map[string]string{
		"kms.example":       "kms.example:5696",
		"kms.example:15696": "kms.example:15696",
		"10.0.0.1":          "10.0.0.1:5696",
		"[fd00::1]:5696":    "[fd00::1]:5696",
		"[fd00::1]":         "[fd00::1]:5696",
	} {
		if got, _, err := kmip.SplitEndpoint(in); err != nil || got != want {
			t.Errorf("SplitEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
