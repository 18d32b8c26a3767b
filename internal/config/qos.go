package config

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"
)

// QoS parameters: librbd's six I/O limits, each either fixed (max<Kind>)
// or from the volume's size (base<Kind> plus <kind>PerGiB for each GiB
// beyond baseVolSizeBytes, capped by max<Kind> where both are set). The
// names are those ceph-csi users know. They are accepted in a
// StorageClass, and are the only mutable parameters (VolumeAttributesClass,
// ControllerModifyVolume).
const ParamBaseVolSize = "baseVolSizeBytes"

// qosKind is one librbd limit and its three parameter names.
type qosKind struct {
	max, base, perGiB string
	// MetaKey is the image metadata key librbd clients (rbd-nbd,
	// rbd-fuse) read the limit from: a per-image config override.
	metaKey string
}

var qosKinds = []qosKind{
	{"maxIops", "baseIops", "iopsPerGiB", "conf_rbd_qos_iops_limit"},
	{"maxReadIops", "baseReadIops", "readIopsPerGiB", "conf_rbd_qos_read_iops_limit"},
	{"maxWriteIops", "baseWriteIops", "writeIopsPerGiB", "conf_rbd_qos_write_iops_limit"},
	{"maxBps", "baseBps", "bpsPerGiB", "conf_rbd_qos_bps_limit"},
	{"maxReadBps", "baseReadBps", "readBpsPerGiB", "conf_rbd_qos_read_bps_limit"},
	{"maxWriteBps", "baseWriteBps", "writeBpsPerGiB", "conf_rbd_qos_write_bps_limit"},
}

// IsQoSParam reports whether k is a QoS parameter name.
func IsQoSParam(k string) bool {
	if k == ParamBaseVolSize {
		return true
	}
	for _, q := range qosKinds {
		if k == q.max || k == q.base || k == q.perGiB {
			return true
		}
	}
	return false
}

// QoSMetaKeys are the image metadata keys a QoS policy may write.
func QoSMetaKeys() []string {
	keys := make([]string, len(qosKinds))
	for i, q := range qosKinds {
		keys[i] = q.metaKey
	}
	return keys
}

// QoS is a volume's QoS policy: the QoS parameters it was given, as
// validated numbers. The zero value limits nothing.
type QoS map[string]uint64

// ParseQoS picks the QoS parameters out of in and checks them: decimal
// numbers without a sign, a per-GiB rate only beside its base, a maximum
// not below its base. Other keys are left to the caller.
func ParseQoS(in map[string]string) (QoS, error) {
	q := QoS{}
	for k, v := range in {
		if !IsQoSParam(k) {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || v == "" || v[0] == '+' {
			return nil, fmt.Errorf("parameter %s: %.30q is not a whole number of at least 0", k, v)
		}
		q[k] = n
	}
	return q, q.check()
}

func (q QoS) check() error {
	for _, k := range qosKinds {
		_, hasBase := q[k.base]
		if _, ok := q[k.perGiB]; ok && !hasBase {
			return fmt.Errorf("parameter %s needs %s, the limit at %s", k.perGiB, k.base, ParamBaseVolSize)
		}
		if max, ok := q[k.max]; ok && hasBase && max != 0 && max < q[k.base] {
			return fmt.Errorf("parameter %s (%d) is below %s (%d)", k.max, max, k.base, q[k.base])
		}
	}
	return nil
}

// Merge returns q with the keys of update set over it: a key update does
// not name keeps its value (the CSI rule for mutable parameters).
func (q QoS) Merge(update QoS) (QoS, error) {
	out := QoS{}
	for k, v := range q {
		out[k] = v
	}
	for k, v := range update {
		out[k] = v
	}
	return out, out.check()
}

// Limits are the metadata values of the policy for a volume of size
// bytes: one per limit kind the policy sets (0 is "no limit" to librbd).
func (q QoS) Limits(size uint64) map[string]string {
	out := map[string]string{}
	for _, k := range qosKinds {
		max, hasMax := q[k.max]
		base, hasBase := q[k.base]
		var v uint64
		switch {
		case hasBase:
			v = satAdd(base, perGiB(q[k.perGiB], size, q[ParamBaseVolSize]))
			if hasMax && max != 0 && v > max {
				v = max
			}
		case hasMax:
			v = max
		default:
			continue
		}
		out[k.metaKey] = strconv.FormatUint(v, 10)
	}
	return out
}

// SizeDependent reports whether the limits change with the volume's size.
func (q QoS) SizeDependent() bool {
	for _, k := range qosKinds {
		if q[k.perGiB] != 0 {
			return true
		}
	}
	return false
}

// perGiB is rate × the GiB of size beyond base, without overflow.
func perGiB(rate, size, base uint64) uint64 {
	if size <= base || rate == 0 {
		return 0
	}
	hi, lo := bits.Mul64(rate, size-base)
	if hi >= 1<<30 {
		return ^uint64(0)
	}
	q, _ := bits.Div64(hi, lo, 1<<30)
	return q
}

func satAdd(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return ^uint64(0)
	}
	return s
}

// String encodes the policy for the image's metadata, keys sorted.
func (q QoS) String() string {
	data, _ := json.Marshal(map[string]uint64(q)) // map keys are sorted by encoding/json
	return string(data)
}

// DecodeQoS reads a policy written by String; empty is no policy.
func DecodeQoS(s string) (QoS, error) {
	q := QoS{}
	if s == "" {
		return q, nil
	}
	if err := json.Unmarshal([]byte(s), &q); err != nil {
		return nil, fmt.Errorf("QoS policy %.60q: %w", s, err)
	}
	for k := range q {
		if !IsQoSParam(k) {
			return nil, fmt.Errorf("QoS policy: unknown key %.40q", k)
		}
	}
	return q, q.check()
}

// QoSParams lists the QoS parameters, sorted.
func QoSParams() []string {
	names := []string{ParamBaseVolSize}
	for _, k := range qosKinds {
		names = append(names, k.max, k.base, k.perGiB)
	}
	sort.Strings(names)
	return names
}

// QoSParamNames lists the QoS parameters, for messages.
func QoSParamNames() string { return strings.Join(QoSParams(), ", ") }

// KernelLimits are a volume's limits as cgroup v2's io.max takes them
// (bytes and operations per second, read and write; 0: none), for krbd,
// which ignores librbd's. A total limit caps both directions.
type KernelLimits struct {
	ReadBps, WriteBps, ReadIops, WriteIops uint64
}

// PublishContextQoS is the ControllerPublishVolume publish-context key
// that carries a volume's KernelLimits to the node.
const PublishContextQoS = "qos"

// KernelLimitsOf reads the limits from an image's metadata.
func KernelLimitsOf(meta map[string]string) KernelLimits {
	get := func(kind string) uint64 {
		v, _ := strconv.ParseUint(meta["conf_rbd_qos_"+kind+"_limit"], 10, 64)
		return v
	}
	return KernelLimits{
		ReadBps: minLimit(get("read_bps"), get("bps")), WriteBps: minLimit(get("write_bps"), get("bps")),
		ReadIops: minLimit(get("read_iops"), get("iops")), WriteIops: minLimit(get("write_iops"), get("iops")),
	}
}

// minLimit is the tighter of two limits, 0 being none.
func minLimit(a, b uint64) uint64 {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// String encodes the limits for the publish context; "" for none.
func (k KernelLimits) String() string {
	if k == (KernelLimits{}) {
		return ""
	}
	return fmt.Sprintf("rbps=%d wbps=%d riops=%d wiops=%d", k.ReadBps, k.WriteBps, k.ReadIops, k.WriteIops)
}

// ParseKernelLimits reads String's form.
func ParseKernelLimits(s string) (KernelLimits, error) {
	var k KernelLimits
	if s == "" {
		return k, nil
	}
	if _, err := fmt.Sscanf(s, "rbps=%d wbps=%d riops=%d wiops=%d", &k.ReadBps, &k.WriteBps, &k.ReadIops, &k.WriteIops); err != nil {
		return KernelLimits{}, fmt.Errorf("QoS limits %.80q: %w", s, err)
	}
	return k, nil
}
