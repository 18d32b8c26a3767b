package main

import (
	"context"
	"testing"
	"time"
)

func TestRegistrationFlags(t *testing.T) {
	f, err := parseFlags([]string{"--mode=node", "--nodeid=n1",
		"--kubelet-registration-path=/var/lib/kubelet/plugins/rbd.csi.rbdcsi.dev/csi.sock",
		"--registration-dir=/reg", "--health-address=:9808", "--health-probe-timeout=2s"})
	if err != nil {
		t.Fatal(err)
	}
	r, h := f.builtins.registration, f.builtins.health
	if r.kubeletPath != "/var/lib/kubelet/plugins/rbd.csi.rbdcsi.dev/csi.sock" || r.dir != "/reg" {
		t.Errorf("registration flags: %+v", r)
	}
	if h.addr != ":9808" || h.timeout != 2*time.Second {
		t.Errorf("health flags: %+v", h)
	}
	if got := r.registration("rbd.csi.rbdcsi.dev").SocketPath(); got != "/reg/rbd.csi.rbdcsi.dev-reg.sock" {
		t.Errorf("socket path %q", got)
	}

	// Off by default.
	f, err = parseFlags([]string{"--mode=node", "--nodeid=n1"})
	if err != nil {
		t.Fatal(err)
	}
	if f.builtins.registration.kubeletPath != "" || f.builtins.health.addr != "" {
		t.Errorf("built-ins are on by default: %+v %+v", f.builtins.registration, f.builtins.health)
	}
	stop, err := f.builtins.start(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	stop()
}

func TestRegistrationValidate(t *testing.T) {
	for _, tc := range []struct {
		name, mode, path, dir string
		ok                    bool
	}{
		{"off", "controller", "", "/registration", true},
		{"node", "node", "/var/lib/kubelet/plugins/d/csi.sock", "/registration", true},
		{"all", "all", "/var/lib/kubelet/plugins/d/csi.sock", "/registration", true},
		{"controller", "controller", "/var/lib/kubelet/plugins/d/csi.sock", "/registration", false},
		{"relative", "node", "csi.sock", "/registration", false},
		{"no dir", "node", "/x/csi.sock", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &registrationFlags{kubeletPath: tc.path, dir: tc.dir}
			if err := r.validate(tc.mode); (err == nil) != tc.ok {
				t.Errorf("validate: %v, want ok=%v", err, tc.ok)
			}
		})
	}
	// The whole start refuses a controller that registers with kubelet.
	f := flags{mode: "controller", driverName: DefaultDriverName, builtins: &builtinFlags{
		registration: &registrationFlags{kubeletPath: "/x/csi.sock", dir: t.TempDir()},
		health:       &healthFlags{},
	}}
	if _, err := f.builtins.start(context.Background(), f); err == nil {
		t.Error("start accepted --kubelet-registration-path in controller mode")
	}
}

func TestHealthStartOffAndBadAddress(t *testing.T) {
	wait, err := (&healthFlags{}).start(context.Background(), "unix:///x.sock")
	if err != nil {
		t.Fatal(err)
	}
	wait()
	if _, err := (&healthFlags{addr: "not-an-address"}).start(context.Background(), "unix:///x.sock"); err == nil {
		t.Error("start accepted a bad --health-address")
	}
}
