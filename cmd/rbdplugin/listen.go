package main

import (
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
