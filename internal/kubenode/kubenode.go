// Package kubenode reads the labels of the Kubernetes Node a node plugin
// runs on, with the pod's service account, so that the plugin can report
// its node's topology. It is the plugin's only use of the Kubernetes API:
// one GET at start, so a small HTTPS client does it, not client-go.
package kubenode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Client reads Node objects from one API server.
type Client struct {
	// BaseURL is the API server, https://host:port.
	BaseURL string
	// Token is the bearer token (a service account's).
	Token string
	HTTP  *http.Client
}

// serviceAccountDir is where Kubernetes mounts a pod's service account.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// InCluster is the Client of a pod: the API server from the
// KUBERNETES_SERVICE_HOST/PORT environment, the service account's token
// and CA from their mount.
func InCluster() (*Client, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, errors.New("not in a Kubernetes pod: KUBERNETES_SERVICE_HOST/PORT are not set")
	}
	token, err := os.ReadFile(filepath.Join(serviceAccountDir, "token"))
	if err != nil {
		return nil, fmt.Errorf("reading the service account token (automountServiceAccountToken must be true): %w", err)
	}
	ca, err := os.ReadFile(filepath.Join(serviceAccountDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("reading the service account CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("the service account CA holds no certificate")
	}
	return &Client{
		BaseURL: "https://" + net.JoinHostPort(host, port),
		Token:   strings.TrimSpace(string(token)),
		HTTP: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		}},
	}, nil
}

// Labels returns the labels of the named Node.
func (c *Client) Labels(ctx context.Context, node string) (map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/api/v1/nodes/"+url.PathEscape(node), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Accept", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading Node %s: %w", node, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("reading Node %s: %w", node, err)
	}
	if resp.StatusCode != http.StatusOK {
		var st struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(body, &st)
		return nil, fmt.Errorf("reading Node %s: %s: %s (the node plugin's service account needs get on nodes)", node, resp.Status, st.Message)
	}
	var n struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &n); err != nil {
		return nil, fmt.Errorf("decoding Node %s: %w", node, err)
	}
	return n.Metadata.Labels, nil
}
