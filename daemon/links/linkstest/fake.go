// Package linkstest is a test double of the kernel's soft RDMA link calls
// that works on a fixture host tree: creating a link creates the sysfs
// directory the real kernel would, so the next read of the host sees it.
// Only tests import it; links.RDMANetlink is the real counterpart.
package linkstest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/rdmad/rdmad/daemon/host"
)

// Netlink fakes links.Netlink on a fixture tree.
type Netlink struct {
	Host *host.Host

	mu     sync.Mutex
	calls  []string
	AddErr error // returned by every LinkAdd when set
	DelErr error // returned by every LinkDel when set
}

// Calls returns the calls made so far ("add rxe0 rxe eth1", "del rxe0").
func (n *Netlink) Calls() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.calls...)
}

// LinkAdd creates sys/class/infiniband/<name> as rxe or siw would.
func (n *Netlink) LinkAdd(name, typ, netdev string) error {
	n.mu.Lock()
	n.calls = append(n.calls, fmt.Sprintf("add %s %s %s", name, typ, netdev))
	addErr := n.AddErr
	n.mu.Unlock()
	if addErr != nil {
		return addErr
	}
	if !n.Host.NetdevExists(netdev) {
		return syscall.ENODEV
	}
	if n.Host.Exists(filepath.Join(host.ClassInfiniband, name)) {
		return syscall.EEXIST
	}
	return AddDevice(n.Host, name, typ, netdev)
}

// LinkDel removes the device directory.
func (n *Netlink) LinkDel(name string) error {
	n.mu.Lock()
	n.calls = append(n.calls, "del "+name)
	delErr := n.DelErr
	n.mu.Unlock()
	if delErr != nil {
		return delErr
	}
	dir := n.Host.Path(host.ClassInfiniband, name)
	if _, err := os.Stat(dir); err != nil {
		return syscall.ENODEV
	}
	return os.RemoveAll(dir)
}

// AddDevice writes the sysfs tree of a soft device: rxe has "parent", siw
// its node description; both have one Ethernet-side port.
func AddDevice(h *host.Host, name, typ, netdev string) error {
	base := h.Path(host.ClassInfiniband, name)
	files := map[string]string{
		"ports/1/state":      "4: ACTIVE\n",
		"ports/1/phys_state": "5: LinkUp\n",
		"ports/1/link_layer": "Ethernet\n",
	}
	switch typ {
	case "rxe":
		files["node_type"] = "1: CA\n"
		files["parent"] = netdev + "\n"
		files["node_desc"] = "rxe\n"
		files["ports/1/gid_attrs/types/0"] = "RoCE v2\n"
		files["ports/1/gid_attrs/ndevs/0"] = netdev + "\n"
	case "siw":
		// siw has no sysfs attribute naming its netdev (RDMA netlink
		// does), so a fixture siw device does not say either.
		files["node_type"] = "4: RNIC\n"
		files["node_desc"] = "Software iWARP stack\n"
	default:
		return syscall.EINVAL
	}
	for rel, data := range files {
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// AddNetdev creates sys/class/net/<name>.
func AddNetdev(h *host.Host, name string) error {
	return os.MkdirAll(h.Path(host.ClassNet, name), 0o755)
}

// RemoveNetdev removes sys/class/net/<name> and, as the kernel does on
// NETDEV_UNREGISTER, every rxe device whose parent it was.
func RemoveNetdev(h *host.Host, name string) error {
	if err := os.RemoveAll(h.Path(host.ClassNet, name)); err != nil {
		return err
	}
	names, err := h.DeviceNames()
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range names {
		p, err := h.ReadString(filepath.Join(host.ClassInfiniband, d, "parent"))
		if err == nil && strings.TrimSpace(p) == name {
			errs = append(errs, os.RemoveAll(h.Path(host.ClassInfiniband, d)))
		}
	}
	return errors.Join(errs...)
}
