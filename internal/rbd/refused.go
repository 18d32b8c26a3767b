package rbd

import (
	"errors"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
)

// Both backends name a refusal the same way, through these: the user, what
// it was refused on and the caps docs/install.md gives for it, so that a
// user reading the error knows what to grant.

// RefusedOn names the user, the pool and the OSD caps in err when it is a
// refusal (ErrPermission) of a call on p; more are further pools the call
// touched (a clone's parent's, a data pool). Any other error, or one
// named already, passes unchanged.
func RefusedOn(p Pool, err error, more ...string) error {
	if !errors.Is(err, ErrPermission) || cluster.Named(err) {
		return err
	}
	pools := []string{p.Name}
	for _, m := range more {
		if m != "" && m != p.Name {
			pools = append(pools, m)
		}
	}
	return &cluster.Refused{User: p.Cred.ID, On: cluster.OnPool(p.Namespace, pools...), Need: cluster.CapRBD(p.Namespace, pools...), Err: err}
}

// RefusedAt is RefusedOn for a call to the monitors, which needs caps.
func RefusedAt(cred cluster.Credentials, caps string, err error) error {
	if !errors.Is(err, ErrPermission) || cluster.Named(err) {
		return err
	}
	return &cluster.Refused{User: cred.ID, On: "the monitors", Need: caps, Err: err}
}

// AuthRefused names the user in err when it is the monitors' refusal
// (ErrPermission) to let cred connect at all.
func AuthRefused(monHost string, cred cluster.Credentials, err error) error {
	if !errors.Is(err, ErrPermission) || cluster.Named(err) {
		return err
	}
	return &cluster.AuthRefused{User: cred.ID, MonHost: monHost, Err: err}
}
