// Package v1beta1: the one type KubeVirt's informer factory names (compile-only stand-in, ../../../README.md).
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// VirtualMachineTemplate carries only object metadata here.
type VirtualMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
}

// DeepCopyObject makes the type a runtime.Object.
func (in *VirtualMachineTemplate) DeepCopyObject() runtime.Object {
	out := &VirtualMachineTemplate{TypeMeta: in.TypeMeta}
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}
