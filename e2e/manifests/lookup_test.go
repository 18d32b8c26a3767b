package manifests

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// only returns the one object of type T in m; the checks that use it
// assume there is exactly one, so any other count stops the test.
func only[T runtime.Object](t *testing.T, m *manifests, kind string) T {
	t.Helper()
	list, _ := all[T](m)
	if len(list) != 1 {
		t.Fatalf("%d %s objects, want 1", len(list), kind)
	}
	return list[0]
}

type namedObject interface {
	GetName() string
	GetNamespace() string
}

func findNamed[T namedObject](list []T, ns, name string) T {
	var zero T
	for _, o := range list {
		if o.GetName() == name && o.GetNamespace() == ns {
			return o
		}
	}
	return zero
}

// byName indexes objects of one namespace (or cluster-scoped ones) by name.
func byName[T namedObject](list []T) map[string]T {
	out := make(map[string]T, len(list))
	for _, o := range list {
		out[o.GetName()] = o
	}
	return out
}

// secretData merges data and stringData as the API server does.
func secretData(s *corev1.Secret) map[string]string {
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	for k, v := range s.StringData {
		out[k] = v
	}
	return out
}

func fmtPtr[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}
