package addons

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// VolumeReplicationClass parameters the driver reads.
const (
	ParamMirroringMode       = "mirroringMode"
	ParamSchedulingInterval  = "schedulingInterval"
	ParamSchedulingStartTime = "schedulingStartTime"
)

// reservedPrefix marks the csi-addons controller's own keys (the secret's
// name and namespace), which reach the driver in some releases.
const reservedPrefix = "replication.storage.openshift.io/"

// classParams is what a VolumeReplicationClass asks for.
type classParams struct {
	// schedule is the image's mirror snapshot schedule; nil: none of its
	// own (the pool's or the cluster's schedules apply, if any).
	schedule *rbd.MirrorSchedule
}

// parseParams checks a class's parameters; every refusal says which
// parameter and what it takes. Unknown keys are refused so that a typo
// never passes for a default.
func parseParams(params map[string]string) (classParams, error) {
	var unknown []string
	for k := range params {
		switch {
		case k == ParamMirroringMode, k == ParamSchedulingInterval, k == ParamSchedulingStartTime, strings.HasPrefix(k, reservedPrefix):
		default:
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return classParams{}, fmt.Errorf("unknown VolumeReplicationClass parameters %q: this driver takes %s, %s and %s", unknown, ParamMirroringMode, ParamSchedulingInterval, ParamSchedulingStartTime)
	}
	switch m := params[ParamMirroringMode]; m {
	case "", rbd.MirrorModeSnapshot:
	case rbd.MirrorModeJournal:
		return classParams{}, fmt.Errorf("%s %q is not offered: journal-based mirroring writes every write twice (data and journal) and is not tested by this driver; use %q", ParamMirroringMode, m, rbd.MirrorModeSnapshot)
	default:
		return classParams{}, fmt.Errorf("%s %.40q: want %q", ParamMirroringMode, m, rbd.MirrorModeSnapshot)
	}
	interval, start := params[ParamSchedulingInterval], params[ParamSchedulingStartTime]
	switch {
	case interval == "" && start != "":
		return classParams{}, fmt.Errorf("%s needs %s", ParamSchedulingStartTime, ParamSchedulingInterval)
	case interval == "":
		return classParams{}, nil
	}
	s := rbd.MirrorSchedule{Interval: interval, StartTime: start}
	if err := s.Validate(); err != nil {
		return classParams{}, fmt.Errorf("%s/%s: %w", ParamSchedulingInterval, ParamSchedulingStartTime, err)
	}
	return classParams{schedule: &s}, nil
}
