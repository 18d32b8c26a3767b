// Package driver hosts the CSI gRPC server: the endpoint, the interceptors
// (request logging with secrets stripped) and the Identity service.
package driver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// Listen opens a CSI endpoint: unix:///abs/path.sock or tcp://host:port.
// A stale socket file from an earlier run is replaced.
func Listen(endpoint string) (net.Listener, func(), error) {
	scheme, addr, ok := strings.Cut(endpoint, "://")
	if !ok || addr == "" {
		return nil, nil, fmt.Errorf("endpoint %q: want unix:///path/to/csi.sock or tcp://host:port", endpoint)
	}
	switch scheme {
	case "tcp":
		l, err := net.Listen("tcp", addr)
		return l, func() {}, err
	case "unix":
		if !filepath.IsAbs(addr) {
			return nil, nil, fmt.Errorf("endpoint %q: the socket path must be absolute", endpoint)
		}
		if err := removeStaleSocket(addr); err != nil {
			return nil, nil, err
		}
		if err := os.MkdirAll(filepath.Dir(addr), 0o750); err != nil {
			return nil, nil, err
		}
		l, err := net.Listen("unix", addr)
		if err != nil {
			return nil, nil, err
		}
		return l, func() { _ = os.Remove(addr) }, nil
	default:
		return nil, nil, fmt.Errorf("endpoint %q: scheme %q is not unix or tcp", endpoint, scheme)
	}
}

func removeStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("endpoint %s exists and is not a socket; refusing to remove it", path)
	}
	return os.Remove(path)
}
