// etcd as upstream's etcd/main.go builds it (go.etcd.io/etcd/server/v3 v3.7.3).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
