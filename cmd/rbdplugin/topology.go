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
// become topology segments and its CRUSH location, and where the labels
// come from.
type topologyFlags struct {
	domainLabels []string
	crushLabels  []string
	nodeLabels   map[string]string // --node-labels; nil: the Node object's
}

// labelKeys parses a comma-separated list of label keys whose short names
// (after the last '/') must differ.
func labelKeys(v string, into *[]string) error {
	short := map[string]string{}
	for _, k := range strings.Split(v, ",") {
		name := config.DomainLabelName(k)
		if err := config.ValidDomainLabel(name); err != nil {
			return fmt.Errorf("label key %q: %w", k, err)
		}
		if other, ok := short[name]; ok {
			return fmt.Errorf("label keys %q and %q both end in %q", other, k, name)
		}
		short[name] = k
		*into = append(*into, k)
	}
	return nil
}

func addTopologyFlags(fs *flag.FlagSet) *topologyFlags {
	t := &topologyFlags{}
	fs.Func("domain-labels", "node: comma-separated node label keys (like topology.kubernetes.io/zone) reported as this node's topology, topology.<driver name>/<part after the last '/'>; StorageClasses' topologyConstrainedPools match on them. Read from the Node object (the node's service account needs get on nodes) unless --node-labels gives them", func(v string) error {
		return labelKeys(v, &t.domainLabels)
	})
	fs.Func("crush-location-labels", "node: comma-separated node label keys (like topology.kubernetes.io/zone) that give this node's CRUSH location, <part after the last '/'>:<value> (zone:zone-a), so krbd reads from the nearest replica (read_from_replica=localize) unless a StorageClass's mapOptions choose; the CRUSH map must have buckets of those types and names. Read like --domain-labels", func(v string) error {
		return labelKeys(v, &t.crushLabels)
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

// place is where the node is: its topology segments (nil without
// --domain-labels) and CRUSH location (nil without --crush-location-labels).
func (t *topologyFlags) place(ctx context.Context, driverName, nodeID string) (segments, crush map[string]string, err error) {
	if len(t.domainLabels)+len(t.crushLabels) == 0 {
		return nil, nil, nil
	}
	labels := t.nodeLabels
	if labels == nil {
		client, err := kubenode.InCluster()
		if err != nil {
			return nil, nil, fmt.Errorf("--domain-labels, --crush-location-labels: %w (or give the labels with --node-labels)", err)
		}
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if labels, err = client.Labels(ctx, nodeID); err != nil {
			return nil, nil, err
		}
	}
	pick := func(flag string, keys []string, name func(string) string) (map[string]string, error) {
		if len(keys) == 0 {
			return nil, nil
		}
		out := map[string]string{}
		for _, k := range keys {
			v, ok := labels[k]
			if !ok {
				return nil, fmt.Errorf("--%s: node %s has no label %s: label it (kubectl label node %s %s=<value>) or leave the label out", flag, nodeID, k, nodeID, k)
			}
			out[name(k)] = v
		}
		return out, nil
	}
	if segments, err = pick("domain-labels", t.domainLabels, func(k string) string { return config.TopologyKey(driverName, config.DomainLabelName(k)) }); err != nil {
		return nil, nil, err
	}
	if crush, err = pick("crush-location-labels", t.crushLabels, config.DomainLabelName); err != nil {
		return nil, nil, err
	}
	for typ, v := range crush {
		if err := config.ValidDomainLabel(v); err != nil {
			return nil, nil, fmt.Errorf("--crush-location-labels: node %s's %s is not a CRUSH bucket name: %w", nodeID, typ, err)
		}
	}
	return segments, crush, nil
}
