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
	seg, err := tf.segments(context.Background(), "rbd.csi.rbdcsi.dev", "node-a")
	if err != nil || len(seg) != 2 || seg["topology.rbd.csi.rbdcsi.dev/zone"] != "z1" || seg["topology.rbd.csi.rbdcsi.dev/region"] != "eu" {
		t.Fatalf("segments %v, %v", seg, err)
	}
	tf, _ = parse("--domain-labels", "rack", "--node-labels", "zone=z1")
	if _, err := tf.segments(context.Background(), "d", "node-a"); err == nil || !strings.Contains(err.Error(), "kubectl label node node-a rack=") {
		t.Errorf("a missing label: %v", err)
	}
	if seg, err := (&topologyFlags{}).segments(context.Background(), "d", "node-a"); seg != nil || err != nil {
		t.Errorf("without --domain-labels: %v, %v", seg, err)
	}
	for _, bad := range [][]string{
		{"--domain-labels", "a.io/zone,b.io/zone"}, // one topology key twice
		{"--domain-labels", "example.com/"},
		{"--domain-labels", "zone,"},
		{"--node-labels", "zone"},
	} {
		if _, err := parse(bad...); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
