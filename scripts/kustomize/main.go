// Command kustomize renders a kustomization to standard output, as
// `kubectl kustomize DIR` does, with the kustomize library this module
// already uses for its manifest tests (no kubectl needed):
//
//	go run ./scripts/kustomize DIR
//
// make release writes dist/rbdcsi.yaml with it.
package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kustomize DIR")
		os.Exit(2)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), os.Args[1])
	if err == nil {
		var out []byte
		if out, err = m.AsYaml(); err == nil {
			_, err = os.Stdout.Write(out)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kustomize:", err)
		os.Exit(1)
	}
}
