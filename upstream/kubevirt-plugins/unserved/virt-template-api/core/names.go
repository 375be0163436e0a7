// Package core: the API group names KubeVirt's informer factory reads (compile-only stand-in, ../../README.md).
package core

const (
	GroupName            = "template.kubevirt.io"
	SingularResourceName = "virtualmachinetemplate"
	PluralResourceName   = "virtualmachinetemplates"
)
