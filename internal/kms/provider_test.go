package kms_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/kms"
	"github.com/rbdcsi/rbdcsi/internal/kms/kmip/kmiptest"
	"github.com/rbdcsi/rbdcsi/internal/kms/kmstest"
)

// The secret provider runs the shared suite with KEKs it draws itself.
func TestSecretProvider(t *testing.T) {
	keks := map[string]string{}
	kmstest.Run(t, kmstest.Provider{
		KMSID: "t",
		NewKEK: func(t *testing.T) string {
			k := make([]byte, kms.MinKEKSize)
			if _, err := rand.Read(k); err != nil {
				t.Fatal(err)
			}
			id := fmt.Sprintf("k%d", len(keks)+1)
			keks[id] = base64.StdEncoding.EncodeToString(k)
			return id
		},
		Open: func(t *testing.T, current string) kms.Keys {
			secrets := map[string]string{"userID": "u", "encryptionKEKCurrent": current}
			for id, k := range keks {
				secrets["encryptionKEK."+id] = k
			}
			keys, err := kms.Config{"t": {Type: kms.TypeSecret}}.Open("t", secrets)
			if err != nil {
				t.Fatal(err)
			}
			return keys
		},
		Secrets: func() []string { return slices.Collect(maps.Values(keks)) },
	})
}

// kmipSecrets are a Secret's keys for the client identity of srv.
func kmipSecrets(srv *kmiptest.Server) map[string]string {
	return map[string]string{
		"userID":           "u",
		"kmipCA":           string(srv.PKI.CA),
		"kmipClientCert":   string(srv.ClientCert),
		"kmipClientKey":    string(srv.ClientKey),
		"encryptionKEK.x1": "not read by a KMS of type kmip",
	}
}

func kmipConfig(endpoint, keyID string) kms.Config {
	return kms.Config{"t": {Type: kms.TypeKMIP, Endpoint: endpoint, KeyID: keyID}}
}

func openKMIP(t *testing.T, endpoint, keyID string, secrets map[string]string) kms.Keys {
	t.Helper()
	keys, err := kmipConfig(endpoint, keyID).Open("t", secrets)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

var binding = kms.Binding{KMSID: "t", Pool: "rbd", Image: "csi-vol-1"}

// KMIP runs the shared suite against a real KMIP server (PyKMIP), then
// what only a remote KMS can do: be down, hang, refuse a certificate, or
// hold keys of another client.
func TestKMIPProvider(t *testing.T) {
	srv := kmiptest.Start(t)
	secrets := kmipSecrets(srv)
	pems := []string{secrets["kmipCA"], secrets["kmipClientCert"], secrets["kmipClientKey"]}
	kmstest.Run(t, kmstest.Provider{
		KMSID:   "t",
		NewKEK:  func(t *testing.T) string { return srv.NewKEK(t) },
		Open:    func(t *testing.T, current string) kms.Keys { return openKMIP(t, srv.Endpoint, current, secrets) },
		Secrets: func() []string { return pems },
	})

	kek := srv.NewKEK(t)
	keys := openKMIP(t, srv.Endpoint, kek, secrets)
	dek, _ := kms.NewDEK()
	w, err := keys.Wrap(ctx(t, time.Minute), dek, binding)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(w), "k1."+kek+".") {
		t.Errorf("wrapped %q: want k1.%s.<nonce>.<ciphertext>.<tag>", w, kek)
	}

	// Another identity of the same CA: PyKMIP's keys are their creator's.
	t.Run("AnotherClient", func(t *testing.T) {
		other := maps.Clone(secrets)
		cert, key := srv.PKI.Client(t, "someone-else")
		other["kmipClientCert"], other["kmipClientKey"] = string(cert), string(key)
		got, err := openKMIP(t, srv.Endpoint, kek, other).Unwrap(ctx(t, time.Minute), w, binding)
		if !errors.Is(err, kms.ErrMissingKEK) || got != nil {
			t.Errorf("Unwrap as another client: %x, %v; want ErrMissingKEK", got, err)
		}
		kmstest.NoSecrets(t, err, append(pems, string(key)), dek)
	})

	// A certificate of another CA, either side: refused at the handshake,
	// which is no outage.
	t.Run("WrongCertificates", func(t *testing.T) {
		stranger := kmiptest.NewPKI(t)
		cert, key := stranger.Client(t, kmiptest.Identity)
		wrongClient := maps.Clone(secrets)
		wrongClient["kmipClientCert"], wrongClient["kmipClientKey"] = string(cert), string(key)
		wrongCA := maps.Clone(secrets)
		wrongCA["kmipCA"] = string(stranger.CA)
		for what, s := range map[string]map[string]string{"client certificate of another CA": wrongClient, "server not signed by the CA": wrongCA} {
			got, err := openKMIP(t, srv.Endpoint, kek, s).Unwrap(ctx(t, time.Minute), w, binding)
			if err == nil || got != nil || errors.Is(err, kms.ErrUnavailable) || errors.Is(err, kms.ErrWrongKEK) {
				t.Errorf("%s: %x, %v; want a TLS failure", what, got, err)
			}
			kmstest.NoSecrets(t, err, append(pems, string(key)), dek)
		}
	})

	// A wrap of one type given to a KMS of the other (its type changed
	// in the configuration): the KEK is missing, nothing is tried.
	t.Run("TypeChanged", func(t *testing.T) {
		sk, err := kms.Config{"t": {Type: kms.TypeSecret}}.Open("t", map[string]string{"encryptionKEK.a": base64.StdEncoding.EncodeToString(make([]byte, 32))})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := sk.Unwrap(ctx(t, time.Minute), w, binding); !errors.Is(err, kms.ErrMissingKEK) || !strings.Contains(err.Error(), "KMIP") {
			t.Errorf("a KMIP wrap under a secret KMS: %x, %v", got, err)
		}
		local, err := sk.Wrap(ctx(t, time.Minute), dek, binding)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := keys.Unwrap(ctx(t, time.Minute), local, binding); !errors.Is(err, kms.ErrMissingKEK) {
			t.Errorf("a secret KMS's wrap under KMIP: %x, %v", got, err)
		}
	})

	// A server that accepts and never answers: the call's deadline ends
	// the wait, as ErrUnavailable.
	t.Run("Hangs", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				held = append(held, c)
			}
		}()
		hung := openKMIP(t, l.Addr().String(), kek, secrets)
		start := time.Now()
		got, err := hung.Unwrap(ctx(t, time.Second), w, binding)
		if !errors.Is(err, kms.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || got != nil {
			t.Errorf("Unwrap from a hung server: %x, %v; want ErrUnavailable", got, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Unwrap from a hung server took %s with a deadline of 1s", d)
		}
	})

	// The server is down: ErrUnavailable, at once, and never a key.
	t.Run("Down", func(t *testing.T) {
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got, err := keys.Unwrap(ctx(t, time.Minute), w, binding)
		if !errors.Is(err, kms.ErrUnavailable) || got != nil {
			t.Errorf("Unwrap with the server down: %x, %v; want ErrUnavailable", got, err)
		}
		kmstest.NoSecrets(t, err, pems, dek)
		nw, err := keys.Wrap(ctx(t, time.Minute), dek, binding)
		if !errors.Is(err, kms.ErrUnavailable) || nw != "" {
			t.Errorf("Wrap with the server down: %q, %v; want ErrUnavailable", nw, err)
		}
		kmstest.NoSecrets(t, err, pems, dek)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("two refused connections took %s", d)
		}
	})
}

// Opening a KMS of type kmip needs its credentials in the Secret, and
// says which are missing or wrong without showing them.
func TestKMIPOpen(t *testing.T) {
	pki := kmiptest.NewPKI(t)
	cert, key := pki.Client(t, "c")
	good := map[string]string{"kmipCA": string(pki.CA), "kmipClientCert": string(cert), "kmipClientKey": string(key)}
	if _, err := kmipConfig("kms.example:5696", "7").Open("t", good); err != nil {
		t.Fatalf("Open: %v", err)
	}
	_, otherKey := pki.Client(t, "d")
	for what, c := range map[string]struct {
		secrets map[string]string
		want    string
	}{
		"no key":           {map[string]string{"kmipCA": string(pki.CA), "kmipClientCert": string(cert)}, "kmipClientKey"},
		"nothing":          {map[string]string{"userID": "u"}, "kmipCA, kmipClientCert, kmipClientKey"},
		"key of another":   {map[string]string{"kmipCA": string(pki.CA), "kmipClientCert": string(cert), "kmipClientKey": string(otherKey)}, "kmipClientKey"},
		"CA not PEM":       {map[string]string{"kmipCA": "garbage", "kmipClientCert": string(cert), "kmipClientKey": string(key)}, "CA"},
		"key in cert slot": {map[string]string{"kmipCA": string(pki.CA), "kmipClientCert": string(key), "kmipClientKey": string(key)}, "certificate"},
	} {
		_, err := kmipConfig("kms.example:5696", "7").Open("t", c.secrets)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error naming %s", what, err, c.want)
		}
		kmstest.NoSecrets(t, err, []string{string(pki.CA), string(cert), string(key), string(otherKey)}, nil)
	}
	// The prefix of an entry that sets one.
	c := kms.Config{"t": {Type: kms.TypeKMIP, Endpoint: "kms.example", KeyID: "7", SecretPrefix: "tenantB"}}
	if _, err := c.Open("t", good); err == nil || !strings.Contains(err.Error(), "tenantBClientKey") {
		t.Errorf("secretPrefix tenantB with kmip* keys: %v", err)
	}
}
