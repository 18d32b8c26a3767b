package addons

import (
	"context"
	"errors"

	"github.com/csi-addons/spec/lib/go/replication"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/controller/records"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
	"github.com/rbdcsi/rbdcsi/internal/volid"
)

// volumes opens the volumes the calls name, for every service that acts
// on one.
type volumes struct{ o Options }

// volume is what a call acts on: the ID it was given, where the image is
// and what it is now.
type volume struct {
	id   string
	pool rbd.Pool
	vol  volid.Volume
	fam  rbd.Family
}

// image is the volume's RBD image name.
func (v volume) image() string { return v.vol.Image }

// volumeID is the request's volume: volume_id, or the replication source's
// volume, which must agree when both are given. Volume groups are not
// replicated by this driver.
func volumeID(id string, src *replication.ReplicationSource) (string, error) {
	if src.GetVolumegroup() != nil {
		return "", status.Error(codes.Unimplemented, "this driver replicates single volumes; volume groups are not offered")
	}
	if s := src.GetVolume().GetVolumeId(); s != "" {
		if id != "" && id != s {
			return "", status.Errorf(codes.InvalidArgument, "volume_id %.130q and replication_source's volume %.130q differ", id, s)
		}
		id = s
	}
	if id == "" {
		return "", status.Error(codes.InvalidArgument, "volume_id is required")
	}
	return id, nil
}

// call is what a replication request names: the call (for messages),
// its volume, its secrets and the class's parameters.
type call struct {
	name    string
	id      string
	src     *replication.ReplicationSource
	secrets map[string]string
	// params are the class's parameters, checked when parse is set (the
	// calls that apply them).
	params map[string]string
	parse  bool
	// mirrored refuses a volume whose replication is off.
	mirrored bool
}

// withVolume is every replication call's preamble: it checks the class's
// parameters, opens the volume under its lock, refuses it unless it is
// mirrored where the call needs that, then runs f and releases the lock.
func (r *volumes) withVolume(ctx context.Context, c call, f func(volume, classParams) error) error {
	var params classParams
	if c.parse {
		var err error
		if params, err = parseParams(c.params); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
	}
	v, release, err := r.open(ctx, c.id, c.src, c.secrets)
	if err != nil {
		return err
	}
	defer release()
	if c.mirrored {
		if err := v.mirrored(c.name); err != nil {
			return err
		}
	}
	return f(v, params)
}

// open resolves the volume of a request, takes its lock (Aborted while
// another call holds it) and reads its image (NotFound when there is none,
// or only an unfinished one). The caller releases the lock. A request
// whose secrets name no Ceph user acts as the driver's own user, as the
// controller's calls do.
func (r *volumes) open(ctx context.Context, id string, src *replication.ReplicationSource, secrets map[string]string) (volume, func(), error) {
	id, err := volumeID(id, src)
	if err != nil {
		return volume{}, nil, err
	}
	vol, err := volid.DecodeVolume(id)
	if err != nil {
		return volume{}, nil, status.Errorf(codes.NotFound, "volume %.130q does not exist", id)
	}
	entry, err := r.o.Clusters.Lookup(vol.ClusterID)
	if err != nil {
		return volume{}, nil, status.Errorf(codes.InvalidArgument, "%v (on a mirror site, the cluster map entry of this site's cluster lists the peer's clusterID in %q)", err, "peerClusterIDs")
	}
	cred, err := r.credentials(secrets)
	if err != nil {
		return volume{}, nil, err
	}
	// The controller's key for the volume (internal/controller): one
	// operation per volume, whichever service it came through.
	release, ok := r.o.Locks.TryLock("vol/" + id)
	if !ok {
		return volume{}, nil, status.Errorf(codes.Aborted, "an operation on volume %s is already in progress; retry later", id)
	}
	v := volume{id: id, vol: vol, pool: rbd.NewPool(entry, cred, vol.Pool)}
	v.fam, err = r.o.Backend.StatFamily(ctx, v.pool, vol.Image, "")
	if errors.Is(err, rbd.ErrNotFound) || errors.Is(err, rbd.ErrPoolNotFound) || (err == nil && r.o.Names.Volume(vol.Image, v.fam.Metadata).State == records.Unfinished) {
		release()
		return volume{}, nil, status.Errorf(codes.NotFound, "volume %s does not exist", id)
	}
	if err != nil {
		release()
		return volume{}, nil, cephStatus(err)
	}
	return v, release, nil
}

// credentials are the Ceph user the request names, else the driver's own.
func (r *volumes) credentials(secrets map[string]string) (cluster.Credentials, error) {
	cred, err := cluster.CallCredentials(secrets, r.o.Credentials, "--controller-secret-dir")
	if err != nil {
		return cluster.Credentials{}, status.Errorf(codes.InvalidArgument, "%v (the VolumeReplicationClass's replication-secret-name/-namespace parameters name the Secret)", err)
	}
	return cred, nil
}

// mirrored refuses a volume whose replication is not enabled.
func (v volume) mirrored(call string) error {
	if v.fam.Mirror == nil {
		return status.Errorf(codes.FailedPrecondition, "%s: replication is not enabled on volume %s (EnableVolumeReplication first)", call, v.id)
	}
	return nil
}
