// The static programs of the real node's images (scripts/build_node.py): the guest entrypoint and the pause
// process. Standard library only, so the module needs no go.sum.
module confidential.tee/tools/node/guest

go 1.26.0
