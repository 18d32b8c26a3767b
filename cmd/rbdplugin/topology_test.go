package main

import (
	"context"
	"flag"
	"strings"
	"testing"
)

func TestTopologyFlags(t *testing.T) {
	parse := func(args ...string) (*topologyFlags, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		tf := addTopologyFlags(fs)
		return tf, fs.Parse(args)
	}
	tf, err := parse("--domain-labels", "topology.kubernetes.io/region,topology.kubernetes.io/zone", "--node-labels", "topology.kubernetes.io/zone=z1,topology.kubernetes.io/region=eu,other=x")
	if err != nil {
		t.Fatal(err)
	}
	seg, _, err := tf.place(context.Background(), "rbd.csi.rbdcsi.dev", "node-a")
	if err != nil || len(seg) != 2 || seg["topology.rbd.csi.rbdcsi.dev/zone"] != "z1" || seg["topology.rbd.csi.rbdcsi.dev/region"] != "eu" {
		t.Fatalf("segments %v, %v", seg, err)
	}
	tf, _ = parse("--domain-labels", "rack", "--node-labels", "zone=z1")
	if _, _, err := tf.place(context.Background(), "d", "node-a"); err == nil || !strings.Contains(err.Error(), "kubectl label node node-a rack=") {
		t.Errorf("a missing label: %v", err)
	}
	if seg, crush, err := (&topologyFlags{}).place(context.Background(), "d", "node-a"); seg != nil || crush != nil || err != nil {
		t.Errorf("without --domain-labels: %v, %v", seg, err)
	}
	tf, _ = parse("--crush-location-labels", "topology.kubernetes.io/zone,example.com/rack", "--node-labels", "topology.kubernetes.io/zone=zone-a,example.com/rack=r7")
	if seg, crush, err := tf.place(context.Background(), "d", "node-a"); err != nil || seg != nil || len(crush) != 2 || crush["zone"] != "zone-a" || crush["rack"] != "r7" {
		t.Errorf("crush location %v (segments %v), %v", crush, seg, err)
	}
	tf, _ = parse("--crush-location-labels", "zone", "--node-labels", "zone=a|b")
	if _, _, err := tf.place(context.Background(), "d", "node-a"); err == nil {
		t.Error("a CRUSH location value with '|' in it was taken")
	}
	for _, bad := range [][]string{
		{"--domain-labels", "a.io/zone,b.io/zone"}, // one topology key twice
		{"--domain-labels", "example.com/"},
		{"--domain-labels", "zone,"},
		{"--node-labels", "zone"},
		{"--crush-location-labels", "a/zone,b/zone"},
	} {
		if _, err := parse(bad...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
