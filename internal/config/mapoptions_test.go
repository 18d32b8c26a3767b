package config

import (
	"strings"
	"testing"
)

func TestOptionsNeedingExclusiveLock(t *testing.T) {
	in := map[string]string{"clusterID": "c1", "pool": "rbd", "mapOptions": "lock_on_read,exclusive", "imageFeatures": "layering,exclusive-lock"}
	if _, err := ParseParams(in); err != nil {
		t.Errorf("lock_on_read and exclusive with exclusive-lock: %v", err)
	}
}

func TestOptionsForAllowed(t *testing.T) {
	for _, tc := range []struct{ param, value, mapper, want string }{
		{ParamMapOptions, "lock_on_read,queue_depth=1024", "krbd", "lock_on_read,queue_depth=1024"},
		{ParamMapOptions, "lock_on_read", "nbd", ""}, // a plain list is krbd's
		{ParamMapOptions, "lock_on_read", "fuse", ""},
		{ParamMapOptions, "krbd:lock_on_read;nbd:try-netlink,io-timeout=30", "krbd", "lock_on_read"},
		{ParamMapOptions, "krbd:lock_on_read;nbd:try-netlink,io-timeout=30", "nbd", "try-netlink,io-timeout=30"},
		{ParamMapOptions, "nbd:try-netlink", "krbd", ""},
		{ParamMapOptions, "krbd:read_from_replica=localize,crush_location=host:node-1|zone:z1", "krbd",
			"read_from_replica=localize,crush_location=host:node-1|zone:z1"},
		{ParamMapOptions, "ms_mode=secure,noudev", "krbd", "ms_mode=secure,noudev"},
		{ParamMapOptions, "krbd:alloc_size=65536,notrim,exclusive,lock_timeout=30,osd_request_timeout=60,mount_timeout=30", "krbd",
			"alloc_size=65536,notrim,exclusive,lock_timeout=30,osd_request_timeout=60,mount_timeout=30"},
		{ParamMapOptions, "nbd:reattach-timeout=300,timeout=60,notrim,exclusive,quiesce,nbds_max=64,max_part=0", "nbd",
			"reattach-timeout=300,timeout=60,notrim,exclusive,quiesce,nbds_max=64,max_part=0"},
		{ParamUnmapOptions, "force", "krbd", "force"},
		{ParamUnmapOptions, "krbd:force,noudev", "krbd", "force,noudev"},
		{ParamUnmapOptions, "force", "nbd", ""},
		{ParamMapOptions, "", "krbd", ""},
	} {
		got, err := OptionsFor(tc.param, tc.value, tc.mapper)
		if err != nil || got != tc.want {
			t.Errorf("OptionsFor(%s, %q, %s) = %q, %v; want %q", tc.param, tc.value, tc.mapper, got, err, tc.want)
		}
		if err := checkOptionsParam(tc.param, tc.value); err != nil {
			t.Errorf("checkOptionsParam(%s, %q): %v", tc.param, tc.value, err)
		}
	}
}

// Every refused option fails at CreateVolume (ParseParams) with a message
// that names it.
func TestOptionsRefused(t *testing.T) {
	for _, tc := range []struct{ param, value, names string }{
		// Files, sockets, keys and identities.
		{ParamMapOptions, "conf=/etc/ceph/other.conf", "conf"},
		{ParamMapOptions, "keyring=/root/k", "keyring"},
		{ParamMapOptions, "secret=AQB", "secret"},
		{ParamMapOptions, "key=AQB", "key"},
		{ParamMapOptions, "name=client.admin", "name"},
		{ParamMapOptions, "id=admin", "id"},
		{ParamMapOptions, "mon_addr=10.0.0.1", "mon_addr"},
		{ParamMapOptions, "fsid=x", "fsid"},
		{ParamMapOptions, "ip=10.0.0.9", "ip"},
		{ParamMapOptions, "nbd:log_file=/etc/passwd", "log_file"},
		{ParamMapOptions, "nbd:log-file=/etc/passwd", "log-file"},
		{ParamMapOptions, "nbd:admin_socket=/run/x.asok", "admin_socket"},
		{ParamMapOptions, "nbd:quiesce-hook=/bin/sh", "quiesce-hook"},
		{ParamMapOptions, "nbd:encryption-passphrase-file=/etc/shadow", "encryption-passphrase-file"},
		{ParamMapOptions, "nbd:device=/dev/sda", "device"},
		{ParamMapOptions, "read_only", "read_only"},
		{ParamMapOptions, "ro", "ro"},
		// Not an option of that mapper, or a bad value.
		{ParamMapOptions, "krbd:try-netlink", "try-netlink"},
		{ParamMapOptions, "nbd:lock_on_read", "lock_on_read"},
		{ParamMapOptions, "queue_depth=many", "queue_depth"},
		{ParamMapOptions, "queue_depth", "queue_depth"},
		{ParamMapOptions, "lock_on_read=1", "lock_on_read"},
		{ParamMapOptions, "ms_mode=plain", "ms_mode"},
		{ParamMapOptions, "read_from_replica=always", "read_from_replica"},
		{ParamMapOptions, "crush_location=host", "crush_location"},
		{ParamMapOptions, "ro --id=admin", "ro --id"},
		{ParamMapOptions, "-o,x", "-o"},
		{ParamMapOptions, "fuse:lock_on_read", "fuse"},
		{ParamMapOptions, "magic:x", "magic"},
		{ParamMapOptions, "krbd:notrim;krbd:exclusive", "twice"},
		{ParamMapOptions, strings.Repeat("notrim,", 80), "512"},
		{ParamUnmapOptions, "krbd:lazy", "lazy"},
		{ParamUnmapOptions, "nbd:force", "force"},
	} {
		_, err := ParseParams(map[string]string{"clusterID": "c1", "pool": "rbd", tc.param: tc.value})
		if err == nil || !strings.Contains(err.Error(), tc.names) || !strings.Contains(err.Error(), tc.param) {
			t.Errorf("%s %q: got %v, want an error naming %q", tc.param, tc.value, err, tc.names)
		}
	}
	// The kernel maps these only with the exclusive-lock feature.
	for _, opt := range []string{"lock_on_read", "krbd:exclusive"} {
		_, err := ParseParams(map[string]string{"clusterID": "c1", "pool": "rbd", "imageFeatures": "layering", ParamMapOptions: opt})
		if err == nil || !strings.Contains(err.Error(), "exclusive-lock") {
			t.Errorf("%s with imageFeatures layering: got %v, want an error naming exclusive-lock", opt, err)
		}
	}
}

// The options that weaken the node's client (no signatures, no CRC) pass
// the allow-list but not CheckMapOptionsSecure, which names each.
func TestInsecureMapOptions(t *testing.T) {
	for _, v := range []string{"nocrc", "lock_on_read,nocephx_require_signatures", "krbd:nocephx_sign_messages", "nbd:try-netlink;krbd:queue_depth=128,nocrc"} {
		if err := checkOptionsParam(ParamMapOptions, v); err != nil {
			t.Errorf("%s: not on the allow-list: %v", v, err)
		}
		if err := CheckMapOptionsSecure(v); err == nil || !strings.Contains(err.Error(), "--allow-insecure-map-options") {
			t.Errorf("%s: %v, want a refusal naming the flag", v, err)
		}
	}
	for _, v := range []string{"", "crc", "krbd:cephx_require_signatures,cephx_sign_messages,ms_mode=secure", "nbd:try-netlink"} {
		if err := CheckMapOptionsSecure(v); err != nil {
			t.Errorf("%s refused: %v", v, err)
		}
	}
}
