package mapper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// rbd-nbd is a user-space daemon: in Kubernetes it lives in the node
// plugin's container and dies with it, while the kernel's /dev/nbdX, the
// filesystem mounted on it and the pods' bind mounts stay. Mapped through
// the kernel's netlink interface, the device then waits reattachTimeout
// for a new daemon, holding (not failing) its I/O, and `rbd device attach`
// gives it one: the node re-attaches at the next call that carries the
// volume's key (Reattacher).
const (
	// reattachTimeout gives a restarted node plugin five minutes to be
	// scheduled, start and be called (kubelet republishes every minute or
	// two with requiresRepublish).
	reattachTimeout = "300"
	// ioTimeout 0: a request never times out while it waits for the new
	// daemon; a shorter one would fail writes (and remount ext4 read-only)
	// before the re-attach. krbd waits for Ceph the same way by default.
	ioTimeout = "0"
)

// Reattacher is the mapper whose mappings can outlive their daemon (nbd).
type Reattacher interface {
	// Orphaned reports whether device is a mapping whose daemon is gone
	// while the kernel still holds the device for a new one.
	Orphaned(ctx context.Context, device string) (bool, error)
	// Reattach starts a new daemon for req.Image on device, presenting
	// req.Cookie, which the kernel compares with the one the device was
	// mapped with before it lets the new daemon in.
	Reattach(ctx context.Context, req MapRequest, device string) error
}

// nbdOptions adds what re-attaching needs to a StorageClass's nbd
// options, where they do not choose: the netlink interface (the ioctl one
// tears the device down with its daemon) and the timeouts above.
func nbdOptions(opts string) string {
	add := func(key, value string) {
		if hasOption(opts, key) {
			return
		}
		kv := key
		if value != "" {
			kv += "=" + value
		}
		if opts == "" {
			opts = kv
		} else {
			opts += "," + kv
		}
	}
	add("try-netlink", "")
	add("reattach-timeout", reattachTimeout)
	add("io-timeout", ioTimeout)
	return opts
}

// nbdSysDir is /sys/block/nbdN of an nbd device path.
func (c *rbdCLI) nbdSysDir(device string) (string, error) {
	name := filepath.Base(device)
	if !strings.HasPrefix(device, "/dev/nbd") || strings.TrimPrefix(name, "nbd") == "" {
		return "", fmt.Errorf("%q is not an nbd device", device)
	}
	if _, err := strconv.Atoi(strings.TrimPrefix(name, "nbd")); err != nil {
		return "", fmt.Errorf("%q is not an nbd device", device)
	}
	return filepath.Join(c.sysRoot, "sys", "block", name), nil
}

// Orphaned: the kernel keeps a device's size while it waits for a new
// daemon and drops it to 0 when it gives up; a live daemon is listed by
// `rbd device list`, which finds the rbd-nbd processes this plugin can see
// (those of its container: a restarted one sees none of its
// predecessor's). The kernel's pid attribute is no help: it keeps the dead
// daemon's pid, and a pid from the host's namespace means nothing in a
// container's.
func (c *rbdCLI) Orphaned(ctx context.Context, device string) (bool, error) {
	if c.name != NBD {
		return false, nil
	}
	dir, err := c.nbdSysDir(device)
	if err != nil {
		return false, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "size"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	sectors, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil || sectors == 0 {
		return false, err
	}
	list, err := c.List(ctx)
	if err != nil {
		return false, err
	}
	for _, m := range list {
		if m.Device == device {
			return false, nil
		}
	}
	return true, nil
}

// Reattach runs `rbd device attach -t nbd` for the device. Like Map, the
// key travels in a short-lived file and errors are cleaned of it.
func (c *rbdCLI) Reattach(ctx context.Context, req MapRequest, device string) error {
	if c.name != NBD {
		return fmt.Errorf("%s mappings cannot be re-attached", c.name)
	}
	if req.Cookie == "" {
		return errors.New("re-attaching needs the cookie the device was mapped with")
	}
	if _, err := c.nbdSysDir(device); err != nil {
		return err
	}
	conf, err := c.nbdConfArgs()
	if err != nil {
		return err
	}
	keyFile, remove, err := c.keys.write(req.Cred.Key)
	if err != nil {
		return err
	}
	defer remove()
	args := append(append([]string{"device", "attach"}, c.typeArgs()...), conf...)
	args = append(args, "--device="+device, "--cookie="+req.Cookie,
		"--id="+req.Cred.ID, "--mon-host="+req.MonHost, "--keyfile="+keyFile, "--options="+nbdOptions(req.Options))
	if req.ReadOnly {
		args = append(args, "--read-only")
	}
	args = append(args, "--pool="+req.Image.Pool)
	if req.Image.Namespace != "" {
		args = append(args, "--namespace="+req.Image.Namespace)
	}
	args = append(args, "--image="+req.Image.Name)
	// runs: rbd-nbd (rbd device attach -t nbd starts it)
	if _, err := c.run.Run(ctx, "rbd", args...); err != nil {
		return redact(named(req, classify(fmt.Errorf("nbd attach %s to %s: %w", req.Image, device, err))), req.Cred.Key)
	}
	return nil
}
