package manifests

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The chart's README, its values, and the first install it shows.
const (
	chartDir     = "helm/rbdcsi"
	chartReadme  = chartDir + "/README.md"
	chartValues  = chartDir + "/values.yaml"
	minimalValue = "helm/values/minimal.yaml"
)

// freeForm are the values whose keys are the user's (KMS IDs, label keys,
// Kubernetes fields), documented as a whole.
var freeForm = map[string]bool{
	"kms": true, "resources": true, "sidecarResources": true, "livenessProbeResources": true,
	"registrarResources": true, "nodeSelector": true, "affinity": true, "updateStrategy": true, "labels": true,
}

// valuePaths lists the dotted paths of v's leaves: values that are not
// maps, and free-form maps.
func valuePaths(prefix string, v any, out *[]string) {
	m, ok := v.(map[string]any)
	last := prefix[strings.LastIndex(prefix, ".")+1:]
	if !ok || freeForm[last] {
		*out = append(*out, prefix)
		return
	}
	for k, sub := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		valuePaths(p, sub, out)
	}
}

var yamlBlock = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// TestChartREADME: the README names every value of values.yaml (the value
// or one of its parents, at least two levels down), and its first install
// is helm/values/minimal.yaml, which the chart's tests render and hold
// against the examples.
func TestChartREADME(t *testing.T) {
	readme, err := os.ReadFile(chartReadme)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(chartValues)
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatalf("%s: %v", chartValues, err)
	}
	var paths []string
	valuePaths("", values, &paths)
	sort.Strings(paths)
	for _, p := range paths {
		parts := strings.Split(p, ".")
		documented := false
		for n := min(2, len(parts)); n <= len(parts); n++ {
			documented = documented || strings.Contains(string(readme), "`"+strings.Join(parts[:n], ".")+"`")
		}
		if !documented {
			t.Errorf("%s: value %s is not in the README's tables", chartReadme, p)
		}
	}
	for _, extra := range []string{"global"} {
		if !strings.Contains(string(readme), "`"+extra+"`") {
			t.Errorf("%s: %s is not in the README's tables", chartReadme, extra)
		}
	}

	blocks := yamlBlock.FindAllSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatalf("%s: no YAML example", chartReadme)
	}
	minimal, err := os.ReadFile(filepath.Clean(minimalValue))
	if err != nil {
		t.Fatal(err)
	}
	var first, want any
	if err := yaml.Unmarshal(blocks[0][1], &first); err != nil {
		t.Fatalf("%s: first YAML example: %v", chartReadme, err)
	}
	if err := yaml.Unmarshal(minimal, &want); err != nil {
		t.Fatalf("%s: %v", minimalValue, err)
	}
	if !reflect.DeepEqual(first, want) {
		t.Errorf("%s: the first install's values are not %s:\n%s", chartReadme, minimalValue, blocks[0][1])
	}
}
