package mapper

import (
	"slices"
	"strings"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/config"
)

// The mapper names the StorageClass vocabulary without importing it: the
// names must be config's.
func TestNamesAgreeWithTheStorageClassParameters(t *testing.T) {
	if !slices.Equal(Names(), config.Mounters()) {
		t.Errorf("mapper names %v, config's mounters %v", Names(), config.Mounters())
	}
	if paramMounter != config.ParamMounter || paramImageFeatures != config.ParamImageFeatures {
		t.Errorf("parameters %q, %q; config's %q, %q", paramMounter, paramImageFeatures, config.ParamMounter, config.ParamImageFeatures)
	}
	if msg := unsupported(Fuse, "no /dev/fuse").Error(); !strings.Contains(msg, `parameter "mounter" (one of krbd, nbd, fuse)`) {
		t.Errorf("unsupported: %s", msg)
	}
}
