package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/config"
	"github.com/rbdcsi/rbdcsi/internal/kubenode"
)

// topologyFlags say where a node plugin's node is: which of its labels
// become topology segments, and where the labels come from.
type topologyFlags struct {
	domainLabels []string
	nodeLabels   map[string]string // --node-labels; nil: the Node object's
}

func addTopologyFlags(fs *flag.FlagSet) *topologyFlags {
	t := &topologyFlags{}
	fs.Func("domain-labels", "node: comma-separated node label keys (like topology.kubernetes.io/zone) reported as this node's topology, topology.<driver name>/<part after the last '/'>; StorageClasses' topologyConstrainedPools match on them. Read from the Node object (the node's service account needs get on nodes) unless --node-labels gives them", func(v string) error {
		short := map[string]string{}
		for _, k := range strings.Split(v, ",") {
			name := config.DomainLabelName(k)
			if err := config.ValidDomainLabel(name); err != nil {
				return fmt.Errorf("label key %q: %w", k, err)
			}
			if other, ok := short[name]; ok {
				return fmt.Errorf("label keys %q and %q both end in %q, one topology key", other, k, name)
			}
			short[name] = k
			t.domainLabels = append(t.domainLabels, k)
		}
		return nil
	})
	fs.Func("node-labels", "node: this node's labels as key=value,... instead of reading the Node object (for orchestrators other than Kubernetes, and tests)", func(v string) error {
		t.nodeLabels = map[string]string{}
		for _, kv := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return fmt.Errorf("%q: want key=value", kv)
			}
			t.nodeLabels[k] = val
		}
		return nil
	})
	return t
}

// segments is the node's topology (nil without --domain-labels).
func (t *topologyFlags) segments(ctx context.Context, driverName, nodeID string) (map[string]string, error) {
	if len(t.domainLabels) == 0 {
		return nil, nil
	}
	labels := t.nodeLabels
	if labels == nil {
		client, err := kubenode.InCluster()
		if err != nil {
			return nil, fmt.Errorf("--domain-labels: %w (or give the labels with --node-labels)", err)
		}
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if labels, err = client.Labels(ctx, nodeID); err != nil {
			return nil, fmt.Errorf("--domain-labels: %w", err)
		}
	}
	seg := map[string]string{}
	for _, k := range t.domainLabels {
		v, ok := labels[k]
		if !ok {
			return nil, fmt.Errorf("--domain-labels: node %s has no label %s: label it (kubectl label node %s %s=<value>) or leave the label out", nodeID, k, nodeID, k)
		}
		seg[config.TopologyKey(driverName, config.DomainLabelName(k))] = v
	}
	return seg, nil
}
