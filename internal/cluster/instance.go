package cluster

import "fmt"

// An instance ID (--instance-id) tells apart the drivers of several
// Kubernetes clusters that share a pool: each lists, attaches, deletes and
// sweeps only what its own instance made. "" is the default instance,
// named as the driver always named things.

// MaxInstanceIDLen keeps instance IDs short: they end every image name.
const MaxInstanceIDLen = 16

// ValidInstanceID checks an instance ID: empty, or 1 to 16 lower-case
// letters, digits and '-', not starting with '-'. It never holds '.',
// which separates it in names.
func ValidInstanceID(s string) error {
	if s == "" {
		return nil
	}
	if len(s) > MaxInstanceIDLen || s[0] == '-' {
		return fmt.Errorf("instance ID %.40q: want 1 to %d lower-case letters, digits and '-', not starting with '-'", s, MaxInstanceIDLen)
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("instance ID %q: only lower-case letters, digits and '-' are allowed", s)
		}
	}
	return nil
}

// InstanceObject names an instance's copy of a per-pool RADOS object (the
// node registry, the indexes): base itself for the default instance.
func InstanceObject(base, instance string) string {
	if instance == "" {
		return base
	}
	return base + "." + instance
}
