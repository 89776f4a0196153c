// Command etcd is etcd's own server (go.etcd.io/etcd/server/v3 at the release
// k8s.io/kubernetes pins), built from this module: the etcd module's go.mod replaces its
// sibling modules with local paths, so it cannot be installed directly.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
