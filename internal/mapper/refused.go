package mapper

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/command"
)

// errRejected marks, beside ErrPermission, a refusal by the monitors to let
// the user connect at all, as against the OSDs' refusal of one image.
var errRejected = errors.New("rejected by the monitors")

// refusal classifies the Ceph tools' words for a refused user. The
// monitors answer a user they do not know, a wrong key or a user without
// mon caps with EACCES, and the tools exit with 13 ("couldn't connect to
// the cluster!"); the OSDs answer an image the user's osd caps do not
// cover with EPERM, "(1) Operation not permitted". err is the failed
// command, ce its own error.
func refusal(err error, ce *command.Error) error {
	stderr := withoutConfigNoise(ce.Stderr)
	var ee *exec.ExitError
	rejected := strings.Contains(stderr, "handle_auth_bad_method") || strings.Contains(stderr, "(13) Permission denied") ||
		errors.As(ce.Err, &ee) && ee.ExitCode() == 13 && strings.Contains(stderr, "connect")
	switch {
	case rejected:
		return fmt.Errorf("%w: %w: %w", ErrPermission, errRejected, err)
	case strings.Contains(stderr, "(1) Operation not permitted"):
		return fmt.Errorf("%w: %w", ErrPermission, err)
	}
	return nil
}

// named says who Ceph refused and the caps to grant, for a refusal of the
// request's user; other errors pass unchanged.
func named(req MapRequest, err error) error {
	switch {
	case errors.Is(err, errRejected):
		return &cluster.AuthRefused{User: req.Cred.ID, MonHost: req.MonHost, Err: err}
	case errors.Is(err, ErrPermission):
		ns, pool := req.Image.Namespace, req.Image.Pool
		return &cluster.Refused{User: req.Cred.ID, On: cluster.OnPool(ns, pool), Need: cluster.CapRBD(ns, pool), Err: err}
	}
	return err
}

// probeTimeout bounds `rbd info` asked why a map failed.
const probeTimeout = 15 * time.Second

// probe asks `rbd info`, as the request's user, why the image could not be
// mapped, for the mappers whose own tool does not say (rbd-nbd exits 1,
// rbd-fuse spins): ErrNotFound or ErrPermission, nil when info answers or
// fails otherwise. auth are the arguments that carry the user, the
// monitors and the key file. It outlives a spent ctx by probeTimeout: the
// caller's deadline may be what the silent tool used up.
func probe(ctx context.Context, run command.Runner, req MapRequest, auth ...string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
	defer cancel()
	args := append(append([]string{"info"}, auth...), "--pool="+req.Image.Pool)
	if req.Image.Namespace != "" {
		args = append(args, "--namespace="+req.Image.Namespace)
	}
	_, err := run.Run(ctx, "rbd", append(args, "--image="+req.Image.Name)...)
	if err == nil {
		return nil
	}
	if err = classify(fmt.Errorf("rbd info as the same user: %w", err)); errors.Is(err, ErrNotFound) || errors.Is(err, ErrPermission) {
		return err
	}
	return nil
}
