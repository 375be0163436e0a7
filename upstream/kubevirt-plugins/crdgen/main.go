// crdgen writes KubeVirt's CustomResourceDefinitions as KubeVirt's virt-operator generates them
// (kubevirt.io/kubevirt v1.9.0, pkg/virt-operator/resource/generate/components, crds.go), serialised by
// KubeVirt's own tools/util.MarshallObject as its tools/resource-generator does for the release manifests
// (`resource-generator --type=kv`). The live tests install them in their control plane (tests/live).
//
// Only the CRDs of the kubevirt.io kinds the collection reads or writes: KubeVirt (roles/kubevirt_cc).
//
// Usage: crdgen DIR   writes DIR/<crd name>.yaml for each.
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	extv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"
	"kubevirt.io/kubevirt/tools/util"
)

var generators = []func() (*extv1.CustomResourceDefinition, error){
	components.NewKubeVirtCrd,
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crdgen DIR")
		os.Exit(2)
	}
	for _, generate := range generators {
		if err := write(os.Args[1], generate); err != nil {
			fmt.Fprintln(os.Stderr, "crdgen:", err)
			os.Exit(1)
		}
	}
}

func write(dir string, generate func() (*extv1.CustomResourceDefinition, error)) error {
	crd, err := generate()
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := util.MarshallObject(crd, &out); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, crd.Name+".yaml"), out.Bytes(), 0o644)
}
