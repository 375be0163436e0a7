// Compile-only stand-in (see ../README.md): not the upstream module.
module kubevirt.io/virt-template-api

go 1.26

require k8s.io/apimachinery v0.34.2
