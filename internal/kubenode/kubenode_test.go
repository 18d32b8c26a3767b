package kubenode

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The client asks for the one Node with the bearer token over TLS, reads
// its labels, and turns a refusal into an error that says what to grant.
func TestLabels(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer sa-token":
			http.Error(w, `{"message":"Unauthorized"}`, http.StatusUnauthorized)
		case r.URL.Path == "/api/v1/nodes/node-a":
			w.Write([]byte(`{"kind":"Node","metadata":{"name":"node-a","labels":{"topology.kubernetes.io/zone":"z1","kubernetes.io/hostname":"node-a"}}}`))
		default:
			w.WriteHeader(http.StatusForbidden)
			w.Write([]byte(`{"kind":"Status","message":"nodes \"other\" is forbidden: User \"system:serviceaccount:rbdcsi-node:rbdcsi-node\" cannot get resource \"nodes\""}`))
		}
	}))
	defer srv.Close()
	c := &Client{BaseURL: srv.URL, Token: "sa-token", HTTP: srv.Client()}
	labels, err := c.Labels(context.Background(), "node-a")
	if err != nil || labels["topology.kubernetes.io/zone"] != "z1" || len(labels) != 2 {
		t.Fatalf("Labels(node-a) = %v, %v", labels, err)
	}
	if _, err := c.Labels(context.Background(), "other"); err == nil || !strings.Contains(err.Error(), "cannot get resource") || !strings.Contains(err.Error(), "get on nodes") {
		t.Errorf("a refused read: %v", err)
	}
	c.Token = "wrong"
	if _, err := c.Labels(context.Background(), "node-a"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a wrong token: %v", err)
	}
	// A name that is not one Node is not a path to anything else.
	c.Token = "sa-token"
	if _, err := c.Labels(context.Background(), "../namespaces/x"); err == nil {
		t.Error("a node name with a path in it was read")
	}
}

func TestInClusterOutsideAPod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := InCluster(); err == nil || !strings.Contains(err.Error(), "not in a Kubernetes pod") {
		t.Errorf("InCluster outside a pod: %v", err)
	}
}
