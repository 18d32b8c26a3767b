package mapper

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// rbd-nbd is a librbd client: read affinity is Ceph configuration to it
// (rbd_read_from_replica_policy, crush_location), not a map option as for
// krbd. It gets them from a config file: the same values as command-line
// config flags would make `rbd-nbd list-mapped` skip the daemon (it cannot
// parse such a command line back), and so the mapping would look lost.
// The file stays: list-mapped and a re-attach read the --conf of the
// running daemons. It holds no key and no address, only the policy and
// the node's CRUSH location, whose bucket names the plugin checked.

// nbdConfName is the file's name under CLIOptions.ConfDir.
const nbdConfName = "rbd-nbd.conf"

// nbdConfText is the whole configuration rbd-nbd gets with read affinity
// ("" without a crush location). The node's /etc/ceph, if any, is not
// read then; the plugin gives the monitors and the key on the command
// line in any case.
func nbdConfText(loc map[string]string) string {
	if len(loc) == 0 {
		return ""
	}
	var kv []string
	for _, t := range slices.Sorted(maps.Keys(loc)) {
		kv = append(kv, t+"="+loc[t])
	}
	return fmt.Sprintf("[client]\nrbd_read_from_replica_policy = localize\ncrush_location = %s\n", strings.Join(kv, " "))
}

// nbdConfArgs writes the config file where its content changed and returns
// the flag that hands it to rbd-nbd (none without read affinity).
func (c *rbdCLI) nbdConfArgs() ([]string, error) {
	if c.name != NBD || c.nbdConf == "" {
		return nil, nil
	}
	if c.confDir == "" {
		return nil, errors.New("read affinity for nbd needs a directory for its config file")
	}
	path := filepath.Join(c.confDir, nbdConfName)
	if old, err := os.ReadFile(path); err == nil && string(old) == c.nbdConf {
		return []string{"--conf=" + path}, nil
	}
	tmp, err := os.CreateTemp(c.confDir, nbdConfName+".*")
	if err != nil {
		return nil, fmt.Errorf("writing rbd-nbd's config: %w", err)
	}
	_, err = tmp.WriteString(c.nbdConf)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return nil, fmt.Errorf("writing rbd-nbd's config: %w", err)
	}
	return []string{"--conf=" + path}, nil
}
