package config

import (
	"fmt"
	"slices"
	"strings"
)

// imageFeatures are the image features a StorageClass may ask for, each
// with the features it needs (rbd(8), "--image-feature").
var imageFeatures = map[string][]string{
	"layering":       nil,
	"exclusive-lock": nil,
	"object-map":     {"exclusive-lock"},
	"fast-diff":      {"object-map"},
	"deep-flatten":   nil,
	"journaling":     {"exclusive-lock"},
}

// krbdCannotMap are the features the kernel client refuses to map. It
// maps all the others since Linux 5.3 (object-map and fast-diff came
// last); rbd-nbd and rbd-fuse run librbd, which maps them all.
var krbdCannotMap = []string{"journaling"}

// SingleWriterFeatures are a new image's features unless its StorageClass
// names others, and unless several nodes write it. With object-map and
// fast-diff, deleting, flattening and diffing touch only the objects that
// were written, whatever the size; exclusive-lock is what they need; with
// deep-flatten, flattening a clone also frees its snapshots from the
// parent. They are also the default of every current Ceph release.
func SingleWriterFeatures() []string {
	return []string{"layering", "exclusive-lock", "object-map", "fast-diff", "deep-flatten"}
}

// MultiWriterFeatures are the default for a volume several nodes write
// (MULTI_NODE_MULTI_WRITER block volumes): the exclusive lock would move
// between the nodes' clients at every write, and object-map needs it.
func MultiWriterFeatures() []string { return []string{"layering", "deep-flatten"} }

// parseFeatures reads the imageFeatures parameter: nil when it is unset
// (the default then depends on the access mode), else the named features,
// each known, with what it needs, and mappable by mounter ("" is the
// node's default mounter, which may be krbd).
func parseFeatures(s, mounter string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if _, ok := imageFeatures[f]; !ok {
			return nil, fmt.Errorf("parameter %s: %.40q is not an image feature this driver creates (choose from %s)", ParamImageFeatures, f, strings.Join(sortedKeys(imageFeatures), ", "))
		}
		if !contains(out, f) {
			out = append(out, f)
		}
	}
	if !contains(out, "layering") {
		return nil, fmt.Errorf("parameter %s: layering is missing; without it the volume's snapshots cannot be restored and the volume cannot be cloned", ParamImageFeatures)
	}
	for _, f := range out {
		for _, need := range imageFeatures[f] {
			if !contains(out, need) {
				return nil, fmt.Errorf("parameter %s: feature %s needs %s", ParamImageFeatures, f, need)
			}
		}
		if contains(krbdCannotMap, f) && mounter != "nbd" && mounter != "fuse" {
			return nil, fmt.Errorf("parameter %s: the kernel client (krbd) cannot map images with %s; set %s to nbd or fuse, which can (no %s means the node's default, which may be krbd)", ParamImageFeatures, f, ParamMounter, ParamMounter)
		}
	}
	return out, nil
}

// VolumeFeatures returns the features a new volume's image gets: the
// StorageClass's, or the default for how the volume is written. It
// refuses map options that need a feature the set lacks.
func (p Params) VolumeFeatures(multiWriter bool) ([]string, error) {
	f := p.ImageFeatures
	if f == nil {
		f = SingleWriterFeatures()
		if multiWriter {
			f = MultiWriterFeatures()
		}
	}
	f = slices.Clone(f)
	if err := checkOptionFeatures(p.MapOptions, f); err != nil {
		if p.ImageFeatures == nil && multiWriter {
			err = fmt.Errorf("%w (a volume without %s that several nodes write gets %s)", err, ParamImageFeatures, strings.Join(MultiWriterFeatures(), ","))
		}
		return nil, err
	}
	return f, nil
}
