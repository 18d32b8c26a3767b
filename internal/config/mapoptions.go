package config

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// The mapOptions and unmapOptions parameters give options per mapper,
// "krbd:lock_on_read,queue_depth=1024;nbd:try-netlink". A plain list
// ("lock_on_read") is krbd's, as in ceph-csi, whose StorageClasses then
// work unchanged. They reach `rbd device map -o`
// and `rbd device unmap -o` as one argv element, never through a shell.
//
// Every option must be on its mapper's allow-list: an option that names a
// file, a socket, a key or another identity (conf, keyring, secret, name,
// log_file, admin_socket, quiesce_hook, ...) could make the node read or
// write host files or map as someone else, so it is refused, by name.

// optionValue checks an option's value; nil means the option takes none.
type optionValue func(v string) bool

var (
	number     = regexp.MustCompile(`^[0-9]{1,9}$`).MatchString
	crushValue = regexp.MustCompile(`^[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+(\|[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+)*$`).MatchString
)

func oneOf(values ...string) optionValue {
	return func(v string) bool {
		for _, w := range values {
			if v == w {
				return true
			}
		}
		return false
	}
}

// mapAllowed lists, per mapper, the options of `rbd device map -o` a
// StorageClass may set. krbd's are the kernel client's (rbd(8), "Kernel
// RBD (krbd) options") plus the rbd tool's udev/noudev; nbd's are those
// `rbd device map -t nbd -o` turns into rbd-nbd flags (rbd-nbd(8)).
var mapAllowed = map[string]map[string]optionValue{
	"krbd": {
		"lock_on_read": nil, "exclusive": nil, "notrim": nil, "abort_on_full": nil, "noshare": nil,
		"rxbounce": nil, "crc": nil, "nocrc": nil, "tcp_nodelay": nil, "notcp_nodelay": nil,
		"cephx_require_signatures": nil, "nocephx_require_signatures": nil,
		"cephx_sign_messages": nil, "nocephx_sign_messages": nil, "udev": nil, "noudev": nil,
		"queue_depth": number, "alloc_size": number, "lock_timeout": number, "mount_timeout": number,
		"osd_request_timeout": number, "osdkeepalive": number, "osd_idle_ttl": number,
		"ms_mode":           oneOf("legacy", "crc", "secure", "prefer-crc", "prefer-secure"),
		"read_from_replica": oneOf("no", "balance", "localize"),
		"compression_hint":  oneOf("none", "compressible", "incompressible"),
		"crush_location":    crushValue,
	},
	"nbd": {
		"try-netlink": nil, "exclusive": nil, "notrim": nil, "quiesce": nil,
		"io-timeout": number, "timeout": number, "reattach-timeout": number, "nbds_max": number, "max_part": number,
	},
}

// unmapAllowed lists the options of `rbd device unmap -o`.
var unmapAllowed = map[string]map[string]optionValue{
	"krbd": {"force": nil, "udev": nil, "noudev": nil},
	"nbd":  {},
}

// refusedOptions are named in the error, so an admin learns why they fail.
var refusedOptions = map[string]bool{
	"conf": true, "keyring": true, "keyfile": true, "key": true, "secret": true, "name": true, "id": true,
	"mon_host": true, "mon_addr": true, "fsid": true, "ip": true, "log_file": true, "log-file": true,
	"admin_socket": true, "admin-socket": true, "quiesce-hook": true, "quiesce_hook": true,
	"encryption-passphrase-file": true, "device": true, "read_only": true, "ro": true, "rw": true,
}

// insecureMapOptions switch off what keeps a forger or a flipped bit on
// the network from reaching the data: cephx message signatures and data
// CRCs. They are on the allow-list for admins who measured the cost and
// accept the risk, and refused unless the driver is started with
// --allow-insecure-map-options.
var insecureMapOptions = map[string]string{
	"nocrc":                      "it turns off the CRC of data in flight",
	"nocephx_require_signatures": "it accepts unsigned messages from the cluster",
	"nocephx_sign_messages":      "it sends unsigned messages to the cluster",
}

// CheckMapOptionsSecure refuses a mapOptions value that weakens how the
// node's client talks to the cluster (insecureMapOptions), for a driver
// not started with --allow-insecure-map-options. The value must have
// passed ParseParams.
func CheckMapOptionsSecure(value string) error {
	if value == "" {
		return nil
	}
	lists, err := splitPerMapper(ParamMapOptions, value)
	if err != nil {
		return err
	}
	for _, m := range sortedKeys(lists) {
		for _, o := range strings.Split(lists[m], ",") {
			if why, ok := insecureMapOptions[o]; ok {
				return fmt.Errorf("parameter %s: option %s is refused: %s (a driver started with --allow-insecure-map-options takes it)", ParamMapOptions, o, why)
			}
		}
	}
	return nil
}

// OptionsFor returns the options of param's value (mapOptions or
// unmapOptions) that apply to mapper, checked against its allow-list.
func OptionsFor(param, value, mapper string) (string, error) {
	if value == "" {
		return "", nil
	}
	if len(value) > 512 {
		return "", fmt.Errorf("parameter %s is longer than 512 bytes", param)
	}
	lists, err := splitPerMapper(param, value)
	if err != nil {
		return "", err
	}
	opts := lists[mapper]
	if opts == "" {
		return "", nil
	}
	allowed := mapAllowed
	if param == ParamUnmapOptions {
		allowed = unmapAllowed
	}
	list, ok := allowed[mapper]
	if !ok {
		return "", fmt.Errorf("parameter %s: the %s mounter takes no options (%.40q)", param, mapper, opts)
	}
	for _, o := range strings.Split(opts, ",") {
		if err := checkOption(param, mapper, o, list); err != nil {
			return "", err
		}
	}
	return opts, nil
}

// splitPerMapper parses "m1:opts;m2:opts", or a plain list (krbd's).
func splitPerMapper(param, value string) (map[string]string, error) {
	if !perMapperPrefix(value) {
		return map[string]string{"krbd": value}, nil
	}
	out := map[string]string{}
	for _, part := range strings.Split(value, ";") {
		m, opts, ok := strings.Cut(part, ":")
		if !ok || !contains(Mounters(), m) {
			return nil, fmt.Errorf("parameter %s: %.40q is not of the form mounter:options (mounter one of %s)", param, part, strings.Join(Mounters(), ", "))
		}
		if _, dup := out[m]; dup {
			return nil, fmt.Errorf("parameter %s: mounter %s appears twice", param, m)
		}
		out[m] = opts
	}
	return out, nil
}

// perMapperPrefix tells "krbd:..." from a plain list whose option value
// holds a colon (crush_location=host:a).
func perMapperPrefix(value string) bool {
	m, _, _ := strings.Cut(value, ":")
	return contains(Mounters(), m)
}

func checkOption(param, mapper, o string, allowed map[string]optionValue) error {
	key, val, hasVal := strings.Cut(o, "=")
	if refusedOptions[key] {
		return fmt.Errorf("parameter %s: option %.40q is not allowed: it names a file, a key or an identity, which the driver sets itself", param, key)
	}
	check, ok := allowed[key]
	if !ok {
		return fmt.Errorf("parameter %s: %.40q is not an option of the %s mounter here (allowed: %s)", param, o, mapper, strings.Join(optionNames(allowed), ", "))
	}
	switch {
	case check == nil && hasVal:
		return fmt.Errorf("parameter %s: option %s of the %s mounter takes no value", param, key, mapper)
	case check != nil && (!hasVal || !check(val)):
		return fmt.Errorf("parameter %s: option %s of the %s mounter has a bad value %.40q", param, key, mapper, val)
	}
	return nil
}

func optionNames(m map[string]optionValue) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// needFeature are krbd options the kernel refuses (EINVAL, "exclusive-lock
// feature is not enabled") on an image without that feature.
var needFeature = map[string]string{"lock_on_read": "exclusive-lock", "exclusive": "exclusive-lock"}

// checkOptionFeatures refuses krbd map options the volume's image features
// cannot serve, at CreateVolume rather than at every NodeStage.
func checkOptionFeatures(mapOptions string, features []string) error {
	opts, err := OptionsFor(ParamMapOptions, mapOptions, "krbd")
	if err != nil || opts == "" {
		return err
	}
	for _, o := range strings.Split(opts, ",") {
		if f, ok := needFeature[o]; ok && !contains(features, f) {
			return fmt.Errorf("parameter %s: krbd option %s needs the image feature %s: add it to %s", ParamMapOptions, o, f, ParamImageFeatures)
		}
	}
	return nil
}

// checkOptionsParam validates a mapOptions or unmapOptions value at
// CreateVolume: every mapper's list, and a non-empty list for a mounter
// the StorageClass does not use is pointless but harmless.
func checkOptionsParam(param, value string) error {
	if value == "" {
		return nil
	}
	lists, err := splitPerMapper(param, value)
	if err != nil {
		return err
	}
	for _, m := range Mounters() {
		if _, ok := lists[m]; !ok {
			continue
		}
		if _, err := OptionsFor(param, value, m); err != nil {
			return err
		}
	}
	return nil
}
