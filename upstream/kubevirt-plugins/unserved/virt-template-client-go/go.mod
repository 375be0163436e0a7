// Compile-only stand-in (see ../README.md): not the upstream module.
module kubevirt.io/virt-template-client-go

go 1.26

require k8s.io/client-go v0.34.2
