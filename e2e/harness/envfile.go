package harness

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ClusterFromDir is the cluster scripts/ceph-cluster.sh keeps in dir,
// read from its env file: for suites with more than one cluster (the
// disaster-recovery suite's two sites), where the environment names one.
func ClusterFromDir(dir string) (Cluster, error) {
	env, err := readEnvFile(filepath.Join(dir, "env"))
	if err != nil {
		return Cluster{}, err
	}
	c := Cluster{
		Conf: env["CEPH_CONF"], MonHost: env["CEPH_MON_HOST"], FSID: env["CEPH_FSID"], Pool: env["CEPH_POOL"],
		ClusterID: env["CEPH_CLUSTER_ID"], Dir: env["CEPH_DIR"], AdminKey: env["CEPH_ADMIN_KEY"],
		CSIUser: env["CEPH_CSI_USER"], CSIKey: env["CEPH_CSI_KEY"], DataPool: env["CEPH_DATA_POOL"],
	}
	if c.Conf == "" || c.CSIKey == "" || c.Dir == "" {
		return c, fmt.Errorf("%s/env does not describe a cluster", dir)
	}
	c.ConfigFile = filepath.Join(c.Dir, "cluster-config.json")
	return c, nil
}

// readEnvFile reads the `export NAME=value` lines ceph-cluster.sh writes
// (values quoted by bash's printf %q, which leaves these plain or
// backslash-escapes them).
func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if !ok {
			continue
		}
		if len(value) >= 2 && value[0] == '\'' && value[len(value)-1] == '\'' {
			value = value[1 : len(value)-1]
		} else {
			var b strings.Builder
			for i := 0; i < len(value); i++ {
				if value[i] == '\\' && i+1 < len(value) {
					i++
				}
				b.WriteByte(value[i])
			}
			value = b.String()
		}
		env[name] = value
	}
	return env, sc.Err()
}
