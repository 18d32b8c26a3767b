package mapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/rbdcsi/rbdcsi/internal/command"
)

// rbdCLI maps through `rbd device map`, the krbd and nbd way; they differ
// in the device type flag, the kernel module they need and (a little) in
// the JSON `rbd device list` prints.
type rbdCLI struct {
	name    string // KRBD or NBD
	run     command.Runner
	keys    KeyDir
	sysRoot string // "/" outside tests
	// probe says why the kernel cannot serve this mapper, "" if it can.
	probe func(sysRoot string) string
	// modprobe is tried once per process: a module that failed to load
	// will not load on the next call either, and Supported stays cheap.
	modprobe sync.Once
	// readAffinity is the krbd options that make reads go to the
	// nearest replica ("" without a crush location).
	readAffinity string
	// nbdConf is rbd-nbd's config file text for the same (nbdconf.go),
	// kept in confDir.
	nbdConf, confDir string
}

// CLIOptions configure the krbd and nbd mappers.
type CLIOptions struct {
	Runner command.Runner
	Keys   KeyDir
	// SysRoot prefixes /sys and /dev paths (tests); empty means "/".
	SysRoot string
	// CrushLocation is this node's place in the CRUSH map (type -> bucket
	// name, like zone -> zone-a): krbd then reads from the nearest replica
	// (read_from_replica=localize), unless a StorageClass's map options
	// choose read_from_replica themselves; nbd always does, through a
	// config file in ConfDir (nbdconf.go).
	CrushLocation map[string]string
	// ConfDir holds the nbd mapper's config file (the node's state
	// directory).
	ConfDir string
}

// NewKRBD returns the kernel RBD mapper.
func NewKRBD(o CLIOptions) Mapper {
	return newCLI(KRBD, o, func(root string) string {
		if exists(root, "sys/bus/rbd") {
			return ""
		}
		return "the kernel has no RBD support (/sys/bus/rbd is missing and `modprobe rbd` did not provide it)"
	})
}

// NewNBD returns the rbd-nbd mapper.
func NewNBD(o CLIOptions) Mapper {
	return newCLI(NBD, o, func(root string) string {
		if exists(root, "sys/module/nbd") || exists(root, "dev/nbd0") {
			return ""
		}
		return "the kernel has no NBD support (/sys/module/nbd and /dev/nbd0 are missing and `modprobe nbd` did not provide them)"
	})
}

func newCLI(name string, o CLIOptions, probe func(string) string) *rbdCLI {
	root := o.SysRoot
	if root == "" {
		root = "/"
	}
	run := o.Runner
	if run == nil {
		run = command.ExecRunner{}
	}
	c := &rbdCLI{name: name, run: quietRunner{run}, keys: o.Keys, sysRoot: root, probe: probe, confDir: o.ConfDir}
	if name == NBD {
		c.nbdConf = nbdConfText(o.CrushLocation)
	}
	if name == KRBD && len(o.CrushLocation) > 0 {
		var loc []string
		for _, t := range slices.Sorted(maps.Keys(o.CrushLocation)) {
			loc = append(loc, t+":"+o.CrushLocation[t])
		}
		c.readAffinity = "read_from_replica=localize,crush_location=" + strings.Join(loc, "|")
	}
	return c
}

func exists(root, rel string) bool {
	_, err := os.Stat(filepath.Join(root, rel))
	return err == nil
}

// module is the kernel module each mapper needs.
func (c *rbdCLI) module() string {
	if c.name == NBD {
		return "nbd"
	}
	return "rbd"
}

// Supported checks the kernel first (loading the module once if it is only
// not loaded yet), then the tools, so the answer is fast and never hangs.
func (c *rbdCLI) Supported(ctx context.Context) error {
	if why := c.probe(c.sysRoot); why != "" {
		// The module may exist but not be loaded yet; rbd would load it
		// itself, but an explicit, bounded attempt gives a clear answer.
		c.modprobe.Do(func() { _, _ = c.run.Run(ctx, "modprobe", c.module()) })
		if why = c.probe(c.sysRoot); why != "" {
			return unsupported(c.name, why)
		}
	}
	tools := []string{"rbd"}
	if c.name == NBD {
		tools = append(tools, "rbd-nbd")
	}
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			return unsupported(c.name, fmt.Sprintf("the %s tool is not installed", t))
		}
	}
	return nil
}

// typeArgs selects the device type for `rbd device` subcommands.
func (c *rbdCLI) typeArgs() []string {
	if c.name == NBD {
		return []string{"--device-type=nbd"}
	}
	return nil
}

// mapArgs is the argv of `rbd device map`. The key travels in keyFile,
// never here, so it does not show in /proc/*/cmdline; conf is
// nbdConfArgs'.
func (c *rbdCLI) mapArgs(req MapRequest, keyFile string, conf ...string) []string {
	args := append(append([]string{"device", "map"}, c.typeArgs()...), conf...)
	// name=value forms: a value can never be taken for an option.
	args = append(args, "--id="+req.Cred.ID, "--mon-host="+req.MonHost, "--keyfile="+keyFile)
	if opts := c.options(req); opts != "" {
		args = append(args, "--options="+opts)
	}
	if req.ReadOnly {
		args = append(args, "--read-only")
	}
	if c.name == NBD && req.Cookie != "" {
		args = append(args, "--cookie="+req.Cookie)
	}
	args = append(args, "--pool="+req.Image.Pool)
	if req.Image.Namespace != "" {
		args = append(args, "--namespace="+req.Image.Namespace)
	}
	return append(args, "--image="+req.Image.Name)
}

// options are the mapOptions, plus for nbd what a re-attach needs
// (nbdOptions), and for krbd:
//   - noudev, unless the options say udev or noudev: the node plugin runs in
//     a container, where udev's events need not reach it and `rbd device map`
//     would wait for them forever; with noudev rbd watches sysfs itself.
//   - ms_mode, when every monitor only speaks msgr2: the kernel client
//     defaults to msgr1 and would not find a monitor at all ("failed to get
//     mon address (possible ms_mode mismatch)");
//   - read affinity, when the node has a crush location and the options
//     choose none (CLIOptions.CrushLocation).
func (c *rbdCLI) options(req MapRequest) string {
	if c.name == NBD {
		return nbdOptions(req.Options)
	}
	opts := withUdevDefault(req.Options)
	if !hasOption(opts, "ms_mode") && onlyMsgr2(req.MonHost) {
		opts += ",ms_mode=prefer-crc"
	}
	if c.readAffinity != "" && !hasOption(opts, "read_from_replica") && !hasOption(opts, "crush_location") {
		opts += "," + c.readAffinity
	}
	return opts
}

// withUdevDefault adds noudev to krbd options that do not choose.
func withUdevDefault(opts string) string {
	if hasOption(opts, "udev") || hasOption(opts, "noudev") {
		return opts
	}
	if opts == "" {
		return "noudev"
	}
	return opts + ",noudev"
}

// hasOption reports whether a comma-separated option list has key, with or
// without a value.
func hasOption(opts, key string) bool {
	for _, o := range strings.Split(opts, ",") {
		if k, _, _ := strings.Cut(o, "="); strings.TrimSpace(k) == key {
			return true
		}
	}
	return false
}

func onlyMsgr2(monHost string) bool {
	for _, m := range strings.Split(monHost, ",") {
		m = strings.TrimPrefix(strings.TrimSpace(m), "[")
		if !strings.HasPrefix(m, "v2:") {
			return false
		}
	}
	return monHost != ""
}

func (c *rbdCLI) unmapArgs(device, options string) []string {
	args := append([]string{"device", "unmap"}, c.typeArgs()...)
	if c.name == KRBD {
		options = withUdevDefault(options)
	}
	if options != "" {
		args = append(args, "--options="+options)
	}
	return append(args, device)
}

// listArgs are rbd-nbd's own: `rbd device list -t nbd` only starts
// `rbd-nbd list-mapped` and passes its output through, and each of the
// two start-ups loads the Ceph libraries.
func (c *rbdCLI) listArgs() []string {
	return []string{"list-mapped", "--format", "json"}
}

// Map maps the image unless it already is (a retried stage must not map a
// second device).
func (c *rbdCLI) Map(ctx context.Context, req MapRequest) (string, error) {
	list, err := c.List(ctx)
	if err != nil {
		return "", err
	}
	if m, ok := Find(list, req.Image); ok {
		return m.Device, nil
	}
	conf, err := c.nbdConfArgs()
	if err != nil {
		return "", err
	}
	keyFile, remove, err := c.keys.write(req.Cred.Key)
	if err != nil {
		return "", err
	}
	defer remove()
	// runs: rbd-nbd (rbd device map -t nbd starts it)
	out, err := c.run.Run(ctx, "rbd", c.mapArgs(req, keyFile, conf...)...)
	if err != nil {
		err = classify(fmt.Errorf("%s map %s: %w", c.name, req.Image, err))
		switch {
		case classified(err) || errors.Is(err, ErrUnsupported):
		case c.name == NBD:
			// rbd-nbd only says it failed; rbd info, as the same user,
			// tells a missing image and a refused user apart.
			if why := probe(ctx, c.run, req, c.authArgs(req, keyFile)...); why != nil {
				err = fmt.Errorf("%w; %w", err, why)
			}
		case c.name == KRBD && strings.Contains(err.Error(), "(6) No such device or address"):
			// The kernel refuses an image whose features it cannot map
			// with ENXIO; the rbd tool says which only where it can read
			// the kernel log, which a container usually cannot.
			if missing := c.unmappableFeatures(ctx, req, keyFile); len(missing) > 0 {
				err = featureError(strings.Join(missing, ", "), err)
			}
		}
		return "", redact(named(req, err), req.Cred.Key)
	}
	dev := strings.TrimSpace(string(out))
	if list, lerr := c.List(ctx); lerr == nil {
		if m, ok := Find(list, req.Image); ok {
			dev = m.Device
		}
	}
	if !strings.HasPrefix(dev, "/dev/") {
		return "", fmt.Errorf("%s map %s: no device in the output (%.100q) nor in `rbd device list`", c.name, req.Image, dev)
	}
	return dev, nil
}

// authArgs are the arguments of an rbd command that carry the request's
// user, monitors and key file.
func (c *rbdCLI) authArgs(req MapRequest, keyFile string) []string {
	return []string{"--id=" + req.Cred.ID, "--mon-host=" + req.MonHost, "--keyfile=" + keyFile}
}

// info runs `rbd info` on the request's image as the request's user.
func (c *rbdCLI) info(ctx context.Context, req MapRequest, keyFile string, extra ...string) ([]byte, error) {
	args := append(append([]string{"info"}, c.authArgs(req, keyFile)...), "--pool="+req.Image.Pool)
	if req.Image.Namespace != "" {
		args = append(args, "--namespace="+req.Image.Namespace)
	}
	args = append(append(args, extra...), "--image="+req.Image.Name)
	return c.run.Run(ctx, "rbd", args...)
}

func classified(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrBusy) ||
		errors.Is(err, ErrPermission) || errors.Is(err, context.DeadlineExceeded)
}

// Unmap unmaps the image's device. The device is looked up by image, never
// taken from the request alone: after a reboot the recorded /dev/rbdN may
// be another volume's.
func (c *rbdCLI) Unmap(ctx context.Context, req UnmapRequest) error {
	list, err := c.List(ctx)
	if err != nil {
		return err
	}
	dev := ""
	for _, m := range list {
		if sameImage(m.Image, req.Image) && (dev == "" || m.Device == req.Device) {
			dev = m.Device
		}
	}
	if dev == "" {
		return nil // not mapped (any more): done
	}
	if _, err := c.run.Run(ctx, "rbd", c.unmapArgs(dev, req.Options)...); err != nil {
		return classify(fmt.Errorf("%s unmap %s: %w", c.name, dev, err))
	}
	return nil
}

func sameImage(a, b Image) bool {
	return a.Pool == b.Pool && a.Namespace == b.Namespace && a.Name == b.Name
}

// List reads krbd's mappings from sysfs, and asks rbd-nbd for nbd's: only
// it can tell a live daemon from a dead one (the kernel keeps a dead
// daemon's pid).
func (c *rbdCLI) List(ctx context.Context) ([]Mapped, error) {
	if c.name == KRBD {
		return listKRBD(c.sysRoot)
	}
	out, err := c.run.Run(ctx, "rbd-nbd", c.listArgs()...)
	if err != nil {
		return nil, fmt.Errorf("%s list: %w", c.name, err)
	}
	return parseDeviceList(out)
}

// deviceEntry covers both shapes: krbd says "name", rbd-nbd says "image";
// krbd's id is a string, rbd-nbd's a number (its pid).
type deviceEntry struct {
	ID        json.RawMessage `json:"id"`
	Pool      string          `json:"pool"`
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	Image     string          `json:"image"`
	Snap      string          `json:"snap"`
	Device    string          `json:"device"`
}

// parseDeviceList decodes `rbd device list --format json`. Snapshot
// mappings are never ours and are left out.
func parseDeviceList(out []byte) ([]Mapped, error) {
	if len(strings.TrimSpace(string(out))) == 0 {
		return nil, nil
	}
	var entries []deviceEntry
	if err := json.Unmarshal(out, &entries); err != nil {
		return nil, fmt.Errorf("parsing `rbd device list` output: %w", err)
	}
	var list []Mapped
	for _, e := range entries {
		name := e.Name
		if name == "" {
			name = e.Image
		}
		if name == "" || e.Device == "" || (e.Snap != "" && e.Snap != "-") {
			continue
		}
		list = append(list, Mapped{Image: Image{Pool: e.Pool, Namespace: e.Namespace, Name: name}, Device: e.Device})
	}
	return list, nil
}

// classify adds the sentinel a caller can act on, from the tool's words.
// A command that ran out of time says nothing about the image, and the
// tools' complaint about a missing ceph.conf (there is none in the
// plugin's container) says "(2) No such file or directory" too: neither
// may pass for a missing image.
func classify(err error) error {
	var ce *command.Error
	if !errors.As(err, &ce) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	s := withoutConfigNoise(ce.Stderr)
	if refused := refusal(err, ce); refused != nil {
		return refused // before "error opening image": a refusal is no missing image
	}
	switch {
	case strings.Contains(s, "feature set mismatch"):
		return featureError(unmappable(s), err)
	case strings.Contains(s, "(2) No such file or directory"), strings.Contains(s, "image not found"),
		strings.Contains(s, "error opening image"), strings.Contains(s, "error opening pool"):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case strings.Contains(s, "(16) Device or resource busy"):
		return fmt.Errorf("%w: %w", ErrBusy, err)
	case unreachable(s):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// quietRunner drops the Ceph tools' complaints about a missing ceph.conf
// from their errors as they come (an error's text is fixed once wrapped):
// they would bury the tool's own words in every message a user sees.
type quietRunner struct{ command.Runner }

func (r quietRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := r.Runner.Run(ctx, name, args...)
	if ce := (*command.Error)(nil); errors.As(err, &ce) {
		ce.Stderr = strings.TrimSpace(withoutConfigNoise(ce.Stderr))
	}
	return out, err
}

// withoutConfigNoise drops the lines the Ceph tools print when they find no
// configuration file, which every mapping here does.
func withoutConfigNoise(stderr string) string {
	var keep []string
	for _, l := range strings.Split(stderr, "\n") {
		if !strings.Contains(l, "ceph.conf") && !strings.Contains(l, "parsing config file") && !strings.Contains(l, "did not load config file") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// unreachable recognises the Ceph tools' words for monitors that do not
// answer in time.
func unreachable(out string) bool {
	for _, s := range []string{"(110) Connection timed out", "failed to fetch mon config", "couldn't connect to the cluster", "authenticate timed out"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

// Refresh waits for the kernel to pick up the new size: krbd and rbd-nbd
// follow image resizes by themselves.
func (c *rbdCLI) Refresh(ctx context.Context, device string, minBytes int64) (int64, error) {
	return waitDeviceSize(ctx, device, minBytes, nil)
}
