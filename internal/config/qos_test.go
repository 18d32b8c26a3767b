package config

import (
	"strings"
	"testing"
)

const gib = 1 << 30

// Size-based limits: base up to baseVolSizeBytes, then the per-GiB rate
// for each GiB beyond, capped by the maximum. The numbers are those of
// ceph-csi's own QoS tests, so a class moved over limits the same.
func TestQoSLimits(t *testing.T) {
	q, err := ParseQoS(map[string]string{
		"baseReadIops": "2000", "readIopsPerGiB": "20", "baseVolSizeBytes": "21474836480",
		"baseWriteBps": "104857600", "writeBpsPerGiB": "1048576", "maxWriteBps": "150000000",
		"maxIops":   "500",
		"clusterID": "not a QoS key",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		size uint64
		want map[string]string
	}{
		{1 * gib, map[string]string{"conf_rbd_qos_read_iops_limit": "2000", "conf_rbd_qos_write_bps_limit": "104857600", "conf_rbd_qos_iops_limit": "500"}},
		{20 * gib, map[string]string{"conf_rbd_qos_read_iops_limit": "2000", "conf_rbd_qos_write_bps_limit": "104857600", "conf_rbd_qos_iops_limit": "500"}},
		{100 * gib, map[string]string{"conf_rbd_qos_read_iops_limit": "3600", "conf_rbd_qos_write_bps_limit": "150000000", "conf_rbd_qos_iops_limit": "500"}},
		{20*gib + gib/2, map[string]string{"conf_rbd_qos_read_iops_limit": "2010", "conf_rbd_qos_write_bps_limit": "105381888", "conf_rbd_qos_iops_limit": "500"}},
		{1 << 62, map[string]string{"conf_rbd_qos_read_iops_limit": "85899347520", "conf_rbd_qos_write_bps_limit": "150000000", "conf_rbd_qos_iops_limit": "500"}},
	} {
		got := q.Limits(c.size)
		if len(got) != len(c.want) {
			t.Errorf("size %d: %v, want %v", c.size, got, c.want)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("size %d: %s = %s, want %s", c.size, k, got[k], v)
			}
		}
	}
	if !q.SizeDependent() {
		t.Error("a policy with per-GiB rates is not size dependent")
	}
	if fixed, _ := ParseQoS(map[string]string{"maxBps": "1"}); fixed.SizeDependent() {
		t.Error("a fixed policy is size dependent")
	}
}

func TestQoSRefusesBadValues(t *testing.T) {
	for _, c := range []struct {
		name string
		in   map[string]string
		says []string // what the error must name
	}{
		{"negative", map[string]string{"maxIops": "-1"}, []string{"maxIops"}},
		{"not a number", map[string]string{"maxBps": "10M"}, []string{"maxBps"}},
		{"signed", map[string]string{"maxBps": "+10"}, []string{"maxBps"}},
		{"empty", map[string]string{"maxBps": ""}, []string{"maxBps"}},
		{"fraction", map[string]string{"baseIops": "1.5"}, []string{"baseIops"}},
		{"too large", map[string]string{"maxIops": "18446744073709551616"}, []string{"maxIops"}},
		{"per-GiB alone", map[string]string{"iopsPerGiB": "10"}, []string{"iopsPerGiB", "baseIops"}},
		{"per-GiB beside another base", map[string]string{"readBpsPerGiB": "10", "baseBps": "100"}, []string{"readBpsPerGiB", "baseReadBps"}},
		{"maximum below base", map[string]string{"baseIops": "100", "maxIops": "50"}, []string{"maxIops", "baseIops"}},
	} {
		_, err := ParseQoS(c.in)
		if err == nil {
			t.Errorf("%s: %v accepted", c.name, c.in)
			continue
		}
		for _, k := range c.says {
			if !strings.Contains(err.Error(), k) {
				t.Errorf("%s: the error does not name %s: %v", c.name, k, err)
			}
		}
	}
}

// A change names some keys and keeps the rest; the result is checked as a
// whole; the policy survives the image's metadata.
func TestQoSMergeAndEncoding(t *testing.T) {
	q, _ := ParseQoS(map[string]string{"baseIops": "100", "iopsPerGiB": "1", "maxBps": "1000"})
	m, err := q.Merge(QoS{"maxBps": 2000})
	if err != nil || m["baseIops"] != 100 || m["iopsPerGiB"] != 1 || m["maxBps"] != 2000 {
		t.Fatalf("merge: %v, %v", m, err)
	}
	if _, err := q.Merge(QoS{"maxIops": 50}); err == nil {
		t.Error("a merge that puts the maximum below the base was accepted")
	}
	back, err := DecodeQoS(m.String())
	if err != nil || back.String() != m.String() {
		t.Fatalf("round trip: %s -> %v, %v", m.String(), back, err)
	}
	if _, err := DecodeQoS(`{"clusterID":1}`); err == nil {
		t.Error("a stored policy with a foreign key was accepted")
	}
	if none, err := DecodeQoS(""); err != nil || len(none) != 0 {
		t.Errorf("no policy: %v, %v", none, err)
	}
}

// krbd's limits come from the image's librbd limits: a total caps both
// directions, the tighter one wins, and they survive the publish context.
func TestKernelLimits(t *testing.T) {
	k := KernelLimitsOf(map[string]string{
		"conf_rbd_qos_bps_limit": "1000", "conf_rbd_qos_read_bps_limit": "500", "conf_rbd_qos_write_bps_limit": "0",
		"conf_rbd_qos_write_iops_limit": "20", "rbdcsi.qos": "{}",
	})
	if want := (KernelLimits{ReadBps: 500, WriteBps: 1000, WriteIops: 20}); k != want {
		t.Fatalf("limits %+v, want %+v", k, want)
	}
	back, err := ParseKernelLimits(k.String())
	if err != nil || back != k {
		t.Fatalf("round trip %q: %+v, %v", k.String(), back, err)
	}
	if none := KernelLimitsOf(nil); none.String() != "" {
		t.Errorf("no limits encode as %q", none.String())
	}
	if _, err := ParseKernelLimits("rbps=x"); err == nil {
		t.Error("a malformed publish context was accepted")
	}
}
