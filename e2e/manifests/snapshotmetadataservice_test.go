package manifests

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// snapshotMetadataService is the SnapshotMetadataService kind of the
// external-snapshot-metadata project (cbt.storage.k8s.io/v1beta1), with
// the fields of its client module's v1.0.0 types. That module is not a
// dependency of this one, so this copy stands in for it in the scheme:
// strict decoding refuses any other field, and caCert must be base64, as
// the API server wants it.
type snapshotMetadataService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              snapshotMetadataServiceSpec `json:"spec"`
}

type snapshotMetadataServiceSpec struct {
	Audience string     `json:"audience"`
	Address  string     `json:"address"`
	CACert   byteFormat `json:"caCert"`
}

// byteFormat is a field of the OpenAPI format byte: one line of standard
// base64, as the API server checks it. Go's decoder of []byte would also
// take base64 folded into lines (kustomize's generated Secrets hold their
// data so), which the API server refuses.
type byteFormat []byte

var base64Line = regexp.MustCompile(`^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$`)

func (b *byteFormat) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	if !base64Line.MatchString(s) {
		return fmt.Errorf("%.40q... is not one line of base64", s)
	}
	out, err := base64.StdEncoding.DecodeString(s)
	*b = out
	return err
}

func (b byteFormat) MarshalJSON() ([]byte, error) {
	return json.Marshal(base64.StdEncoding.EncodeToString(b))
}

func (in *snapshotMetadataService) DeepCopyObject() runtime.Object {
	out := *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.CACert = slices.Clone(in.Spec.CACert)
	return &out
}

func addSnapshotMetadataService(s *runtime.Scheme) error {
	gv := schema.GroupVersion{Group: "cbt.storage.k8s.io", Version: "v1beta1"}
	s.AddKnownTypeWithName(gv.WithKind("SnapshotMetadataService"), &snapshotMetadataService{})
	return nil
}
