//go:build e2e_k8s

package k8s

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// The driver's cluster map is one ConfigMap, rbdcsi-cluster-config, which
// the controller and the node plugins mount. Scenarios that run side by
// side add entries of their own to it: each edit writes over the version
// it read (its resourceVersion) and is made again on a conflict, so no
// scenario loses another's entry, and each takes out only its own.

const clusterMapKey = "cluster-config.json"

// editClusterMap applies edit to the map's entries.
func editClusterMap(t *testing.T, k *kube, edit func([]map[string]any) []map[string]any) {
	t.Helper()
	k = &kube{t: t, e: k.e, ns: driverNamespace}
	for try := 0; ; try++ {
		var cm struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
			Data map[string]string `json:"data"`
		}
		if !k.get(&cm, "configmap", "rbdcsi-cluster-config") {
			t.Fatalf("no ConfigMap rbdcsi-cluster-config in %s", driverNamespace)
		}
		var clusters []map[string]any
		if err := json.Unmarshal([]byte(cm.Data[clusterMapKey]), &clusters); err != nil {
			t.Fatalf("the cluster map: %v", err)
		}
		data, err := json.Marshal(edit(clusters))
		must(t, err)
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]string{"resourceVersion": cm.Metadata.ResourceVersion},
			"data":     map[string]string{clusterMapKey: string(data)},
		})
		must(t, err)
		_, err = k.run(shortWait, "", "patch", "configmap", "rbdcsi-cluster-config", "--type", "merge", "-p", string(patch))
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "Conflict") && !strings.Contains(err.Error(), "modified") || try == 20 {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// addToClusterMap adds entry (its clusterID a new one) to the map and
// takes it out when t ends.
func addToClusterMap(t *testing.T, k *kube, entry map[string]any) {
	t.Helper()
	id, _ := entry["clusterID"].(string)
	editClusterMap(t, k, func(cs []map[string]any) []map[string]any { return append(cs, entry) })
	t.Cleanup(func() { removeFromClusterMap(t, k, id) })
}

// removeFromClusterMap takes the entry of clusterID out of the map.
func removeFromClusterMap(t *testing.T, k *kube, clusterID string) {
	t.Helper()
	editClusterMap(t, k, func(cs []map[string]any) []map[string]any {
		return slices.DeleteFunc(cs, func(c map[string]any) bool { return c["clusterID"] == clusterID })
	})
}
