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
	if _, ok := md[MetaHeader]; ok {
		t.Errorf("a record without a header MAC writes %s", MetaHeader)
	}
	got, ok, err := ReadVolumeKey(md)
	if err != nil || !ok || got != k {
		t.Fatalf("ReadVolumeKey = %+v, %v, %v", got, ok, err)
	}
	mac, err := NewHeaderMAC(dek, make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	bound := VolumeKey{KMSID: "tenant-a", DEK: w, State: StateFormatted, Header: mac}
	if got, ok, err := ReadVolumeKey(bound.Metadata()); err != nil || !ok || got != bound {
		t.Fatalf("ReadVolumeKey(with a header MAC) = %+v, %v, %v", got, ok, err)
	}
	if _, ok, err := ReadVolumeKey(map[string]string{"rbdcsi.name": "pvc-1"}); ok || err != nil {
		t.Fatalf("plain image: ok %v, err %v", ok, err)
	}
	if _, ok, err := ReadVolumeKey(map[string]string{MetaHeader: string(mac)}); !ok || !errors.Is(err, ErrBadRecord) {
		t.Errorf("a header MAC alone: ok %v, err %v; want part of a record, ErrBadRecord", ok, err)
	}
	for name, change := range map[string]func(map[string]string){
		"no DEK":    func(m map[string]string) { delete(m, MetaDEK) },
		"bad DEK":   func(m map[string]string) { m[MetaDEK] = "v9.x" },
		"no KMS":    func(m map[string]string) { delete(m, MetaKMS) },
		"bad state": func(m map[string]string) { m[MetaState] = "open" },
		"no state":  func(m map[string]string) { delete(m, MetaState) },
		"bad header MAC version": func(m map[string]string) {
			m[MetaHeader] = "v9.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
		},
		"short header MAC": func(m map[string]string) { m[MetaHeader] = "v1.AAAA" },
		"empty header MAC": func(m map[string]string) { m[MetaHeader] = "" },
	} {
		bad := maps.Clone(md)
		change(bad)
		if _, ok, err := ReadVolumeKey(bad); !ok || !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: ok %v, err %v; want ErrBadRecord", name, ok, err)
		}
	}
}
