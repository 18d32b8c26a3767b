package ceph

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"sync"
	"syscall"

	"github.com/ceph/go-ceph/rados"
	"k8s.io/klog/v2"
)

// keyTypes learns once whether the linked librados reads AES256K keys.
// A client that cannot read a key prints it on stderr ("failed to decode
// key '...'"), so a user's AES256K key goes to librados only once a
// made-up key of that type has shown that it can.
type keyTypes struct {
	once    sync.Once
	aes256k bool
}

func (k *keyTypes) readsAES256K() bool {
	k.once.Do(func() {
		k.aes256k = probeAES256K()
		klog.V(2).InfoS("Ceph client key types", "AES256K", k.aes256k)
	})
	return k.aes256k
}

// probeAES256K connects with a made-up AES256K key (all zero) to a
// loopback port where no monitor listens. A client that cannot read the key
// fails at once with EINVAL ("keyring not found"); one that can goes on to
// look for the monitor and fails otherwise, after at most a second.
func probeAES256K() bool {
	conn, err := rados.NewConnWithUser("rbdcsi-key-probe")
	if err != nil {
		return false
	}
	defer conn.Shutdown()
	// type 2 (AES256K), creation time, secret length 32, secret.
	raw := make([]byte, 12+32)
	binary.LittleEndian.PutUint16(raw[0:], 2)
	binary.LittleEndian.PutUint16(raw[10:], 32)
	for _, o := range [][2]string{
		{"mon_host", "v2:127.0.0.1:1"},
		{"key", base64.StdEncoding.EncodeToString(raw)},
		{"keyring", "/dev/null"},
		{"client_mount_timeout", "1"},
		{"admin_socket", ""},
		{"log_to_stderr", "false"},
		{"err_to_stderr", "false"},
	} {
		if err := conn.SetConfigOption(o[0], o[1]); err != nil {
			return false
		}
	}
	err = conn.Connect()
	var e errnoer
	return !(errors.As(err, &e) && syscall.Errno(-e.ErrorCode()) == syscall.EINVAL)
}
