package mapper

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Telling a user that the node's kernel cannot map an image's features,
// and which: from the rbd tool's words where it could read the kernel
// log, else by comparing the image's features with the kernel's list.

// featureBits are the kernel's bits of the image features (the kernel's
// drivers/block/rbd.c and Ceph's rbd/features.h agree on them).
var featureBits = map[string]uint64{
	"layering": 1 << 0, "striping": 1 << 1, "exclusive-lock": 1 << 2, "object-map": 1 << 3, "fast-diff": 1 << 4,
	"deep-flatten": 1 << 5, "journaling": 1 << 6, "data-pool": 1 << 7, "operations": 1 << 8,
}

// unmappableFeatures lists the image's features that this kernel does not
// map (it says which it does in /sys/bus/rbd/supported_features, since
// Linux 4.11). Nil when either side cannot be read.
func (c *rbdCLI) unmappableFeatures(ctx context.Context, req MapRequest, keyFile string) []string {
	raw, err := os.ReadFile(filepath.Join(c.sysRoot, "sys/bus/rbd/supported_features"))
	if err != nil {
		return nil
	}
	supported, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(raw)), "0x"), 16, 64)
	if err != nil {
		return nil
	}
	out, err := c.info(ctx, req, keyFile, "--format=json")
	var image struct {
		Features []string `json:"features"`
	}
	if err != nil || json.Unmarshal(out, &image) != nil {
		return nil
	}
	var missing []string
	for _, f := range image.Features {
		if bit, known := featureBits[f]; known && supported&bit == 0 {
			missing = append(missing, f)
		}
	}
	return missing
}

// featureError says that the node's kernel cannot map the image, and what
// to do about it.
func featureError(features string, err error) error {
	return fmt.Errorf("%w: the kernel of this node cannot map the image's features %s (object-map and fast-diff need Linux 5.3; journaling no kernel maps): "+
		"stage it with %s nbd, or create volumes for such nodes from a StorageClass with %s: layering: %w",
		ErrUnsupported, features, paramMounter, paramImageFeatures, err)
}

// unmappable names the features the rbd tool suggests disabling after a
// feature mismatch ("... with \"rbd feature disable pool/image a b\"."), or
// says they are unknown when it named none.
func unmappable(stderr string) string {
	_, rest, ok := strings.Cut(stderr, "rbd feature disable ")
	if !ok {
		return "(which, the kernel log says)"
	}
	words := strings.Fields(strings.SplitN(rest, "\"", 2)[0])
	if len(words) < 2 {
		return "(which, the kernel log says)"
	}
	return strings.Join(words[1:], ", ")
}
