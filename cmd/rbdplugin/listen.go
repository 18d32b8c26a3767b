package main

import (
	"fmt"
	"net"
	"strings"
)

// listenAddress accepts what a manifest can build from the downward API,
// "$(POD_IP):9819", for an IPv6 pod IP too, where that reads
// "fd00::5:9819": an unbracketed host with colons gets its brackets, the
// port being what follows the last colon. Anything else is left as given
// for net.Listen to judge.
func listenAddress(addr string) string {
	if strings.HasPrefix(addr, "[") || strings.Count(addr, ":") < 2 {
		return addr
	}
	i := strings.LastIndex(addr, ":")
	if net.ParseIP(addr[:i]) == nil {
		return addr
	}
	return net.JoinHostPort(addr[:i], addr[i+1:])
}

// loopbackAddress reports whether host:port binds only the loopback
// interface: a loopback IP or "localhost". An empty host binds them all.
func loopbackAddress(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkEndpoint refuses a tcp:// endpoint outside loopback unless remote
// says so: the CSI API has no authentication of its own, and whoever
// reaches it can stage any volume whose secrets it holds, or delete any.
func checkEndpoint(flag, endpoint string, remote bool) error {
	addr, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok || remote || loopbackAddress(addr) {
		return nil
	}
	return fmt.Errorf("%s %s: a TCP endpoint serves its API unauthenticated; bind it to 127.0.0.1 or [::1], or pass --allow-remote-endpoint for a test across machines", flag, endpoint)
}
