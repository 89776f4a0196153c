// Command coredns is CoreDNS (github.com/coredns/coredns) with only the plugins a cluster's
// DNS needs for torchdag's pod network: kubernetes (Services and their pods' names, from the
// API server), bind (the address it serves on), errors and log. CoreDNS documents this way
// of choosing plugins: set dnsserver.Directives and import the plugins.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins named in directives, registered by import.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
)

// In CoreDNS's own order (plugin.cfg): the order a query passes them.
var directives = []string{"bind", "errors", "log", "kubernetes"}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
