package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// ParamTopologyConstrainedPools is a JSON list of TopologyPool, as
// ceph-csi users know it: a volume goes to the first pool whose domain
// segments match the CO's preferred topologies, then its requisite ones.
const ParamTopologyConstrainedPools = "topologyConstrainedPools"

// TopologyPool is a pool (and optional data pool) serving one topology.
type TopologyPool struct {
	PoolName       string          `json:"poolName"`
	DataPool       string          `json:"dataPool,omitempty"`
	DomainSegments []DomainSegment `json:"domainSegments"`
}

// DomainSegment is one label of a topology: the node plugin reports its
// node's label <something>/<DomainLabel> as topology.<driver>/<DomainLabel>.
type DomainSegment struct {
	DomainLabel string `json:"domainLabel"`
	Value       string `json:"value"`
}

// maxTopologyPools bounds the list: every pool may cost a lookup per create.
const maxTopologyPools = 32

// parseTopologyPools reads and validates the parameter ("" gives nil).
func parseTopologyPools(s string) ([]TopologyPool, error) {
	if s == "" {
		return nil, nil
	}
	if len(s) > 16384 {
		return nil, fmt.Errorf("parameter %s is longer than 16 KiB", ParamTopologyConstrainedPools)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	var pools []TopologyPool
	if err := dec.Decode(&pools); err != nil {
		return nil, fmt.Errorf("parameter %s: want a JSON list of {poolName, dataPool, domainSegments: [{domainLabel, value}]}: %w", ParamTopologyConstrainedPools, err)
	}
	if len(pools) == 0 || len(pools) > maxTopologyPools {
		return nil, fmt.Errorf("parameter %s: want 1 to %d pools, have %d", ParamTopologyConstrainedPools, maxTopologyPools, len(pools))
	}
	seen := map[string]bool{}
	for i, p := range pools {
		what := fmt.Sprintf("parameter %s, pool %d", ParamTopologyConstrainedPools, i+1)
		if err := volid.ValidPool(p.PoolName); err != nil {
			return nil, fmt.Errorf("%s: poolName: %w", what, err)
		}
		if seen[p.PoolName] {
			return nil, fmt.Errorf("%s: pool %s is listed twice", what, p.PoolName)
		}
		seen[p.PoolName] = true
		if p.DataPool != "" {
			if err := volid.ValidPool(p.DataPool); err != nil {
				return nil, fmt.Errorf("%s: dataPool: %w", what, err)
			}
		}
		if len(p.DomainSegments) == 0 {
			return nil, fmt.Errorf("%s (%s): domainSegments is empty; a pool without them would match any topology", what, p.PoolName)
		}
		labels := map[string]bool{}
		for _, s := range p.DomainSegments {
			if err := ValidDomainLabel(s.DomainLabel); err != nil {
				return nil, fmt.Errorf("%s (%s): %w", what, p.PoolName, err)
			}
			if labels[s.DomainLabel] {
				return nil, fmt.Errorf("%s (%s): domain label %s is listed twice", what, p.PoolName, s.DomainLabel)
			}
			labels[s.DomainLabel] = true
			if err := validLabelValue(s.Value); err != nil {
				return nil, fmt.Errorf("%s (%s), domain label %s: %w", what, p.PoolName, s.DomainLabel, err)
			}
		}
	}
	return pools, nil
}

// ValidDomainLabel checks a domain label's short name (the part of a node
// label's key after its last '/'), which becomes a topology key's name.
func ValidDomainLabel(s string) error {
	if s == "" || len(s) > 63 || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return fmt.Errorf("domain label %.70q: want 1 to 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit", s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("domain label %q: only letters, digits, '-', '_' and '.' are allowed", s)
		}
	}
	return nil
}

// validLabelValue checks a Kubernetes label value (empty is one).
func validLabelValue(s string) error {
	if s == "" {
		return nil
	}
	return ValidDomainLabel(s)
}

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }

// TopologyKey is the CSI topology key of a domain label for a driver.
func TopologyKey(driverName, domainLabel string) string {
	return "topology." + driverName + "/" + domainLabel
}

// Segments is the pool's topology, keyed for the driver.
func (p TopologyPool) Segments(driverName string) map[string]string {
	seg := make(map[string]string, len(p.DomainSegments))
	for _, s := range p.DomainSegments {
		seg[TopologyKey(driverName, s.DomainLabel)] = s.Value
	}
	return seg
}

// Serves reports whether every domain segment of the pool is in the
// topology.
func (p TopologyPool) Serves(driverName string, topology map[string]string) bool {
	for k, v := range p.Segments(driverName) {
		if got, ok := topology[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// DomainLabelName is the short name of a node label key: the part after
// its last '/' (topology.kubernetes.io/zone gives zone).
func DomainLabelName(labelKey string) string {
	return labelKey[strings.LastIndex(labelKey, "/")+1:]
}
