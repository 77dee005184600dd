// Command ethtool-probe makes the ethtool calls rdmad makes, with rdmad's
// own code, on one netdev and prints each result: the e2e sandbox scenario
// runs it under the unit's sandbox (and with parts of it taken away) to
// show that the global pause request (ethtool netlink) and the PFC storm
// timeout ioctl (SIOCETHTOOL on an AF_NETLINK socket) pass the unit's
// address-family and system-call filters. A test tool: not installed with
// rdmad.
package main

import (
	"fmt"
	"os"

	"github.com/rdmad/rdmad/daemon/ethtool"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: ethtool-probe NETDEV")
		os.Exit(2)
	}
	var k ethtool.Netlink
	p, err := k.Pause(os.Args[1])
	report("pause", p, err)
	ms, err := k.PFCStormTimeout(os.Args[1])
	report("tunable", ms, err)
}

func report(what string, v any, err error) {
	if err != nil {
		fmt.Printf("%s: error: %v\n", what, err)
		return
	}
	fmt.Printf("%s: %v\n", what, v)
}
