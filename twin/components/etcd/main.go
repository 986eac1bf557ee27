// Command etcd is etcd's own server, built from go.etcd.io/etcd/server/v3 at the version
// go.mod pins: the twin's Kubernetes API server keeps its objects here.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
