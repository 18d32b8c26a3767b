package kms

import (
	"errors"
	"maps"
	"testing"
)

func TestVolumeKeyMetadata(t *testing.T) {
	kek := make([]byte, MinKEKSize)
	dek, _ := NewDEK()
	w, err := Wrap("k1", kek, dek, testBinding)
	if err != nil {
		t.Fatal(err)
	}
	k := VolumeKey{KMSID: "tenant-a", DEK: w, State: StatePrepared}
	md := k.Metadata()
	got, ok, err := ReadVolumeKey(md)
	if err != nil || !ok || got != k {
		t.Fatalf("ReadVolumeKey = %+v, %v, %v", got, ok, err)
	}
	if _, ok, err := ReadVolumeKey(map[string]string{"rbdcsi.name": "pvc-1"}); ok || err != nil {
		t.Fatalf("plain image: ok %v, err %v", ok, err)
	}
	for name, change := range map[string]func(map[string]string){
		"no DEK":    func(m map[string]string) { delete(m, MetaDEK) },
		"bad DEK":   func(m map[string]string) { m[MetaDEK] = "v9.x" },
		"no KMS":    func(m map[string]string) { delete(m, MetaKMS) },
		"bad state": func(m map[string]string) { m[MetaState] = "open" },
		"no state":  func(m map[string]string) { delete(m, MetaState) },
	} {
		bad := maps.Clone(md)
		change(bad)
		if _, ok, err := ReadVolumeKey(bad); !ok || !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: ok %v, err %v; want ErrBadRecord", name, ok, err)
		}
	}
}
