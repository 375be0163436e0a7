// Package virttemplate: the client constructor KubeVirt's informer factory calls (compile-only stand-in,
// ../../README.md). It always fails: nothing the upstream checks run reaches it.
package virttemplate

import (
	"errors"

	"k8s.io/client-go/rest"
)

// TemplateV1beta1Interface is the part of the generated clientset the informer factory uses.
type TemplateV1beta1Interface interface {
	RESTClient() rest.Interface
}

// Clientset is never constructed.
type Clientset struct{}

// TemplateV1beta1 is never reached (NewForConfig fails).
func (c *Clientset) TemplateV1beta1() TemplateV1beta1Interface { return nil }

// NewForConfig fails: the real client module is not served by the Go module proxy.
func NewForConfig(*rest.Config) (*Clientset, error) {
	return nil, errors.New("kubevirt.io/virt-template-client-go is not served by the Go module proxy; this is a compile-only stand-in")
}
