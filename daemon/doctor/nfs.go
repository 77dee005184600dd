package doctor

import (
	"fmt"
	"strconv"
	"strings"
)

// nfsRDMAPort is the IANA port of NFS over RDMA ("nfsrdma").
const nfsRDMAPort = 20049

// nfsRDMAConfig is what /etc/nfs.conf (and nfs.conf.d) say of NFS over
// RDMA, read as rpc.nfsd reads it: rdma=y enables it on rdma-port (default
// nfsrdma, 20049); an older form gives the port in rdma= itself.
type nfsRDMAConfig struct {
	enabled bool
	port    int
	where   string
}

func (d *diag) nfsConfig() nfsRDMAConfig {
	files := append([]string{"etc/nfs.conf"}, d.h.DropIns(".conf", "etc/nfs.conf.d")...)
	var rdma, rdmaPort, where string
	for _, f := range files {
		section, n := "", 0
		_ = boundedLines(d.h, f, capConfig, func(line string) bool {
			n++
			line = strings.TrimSpace(line)
			switch {
			case line == "" || line[0] == '#' || line[0] == ';':
			case line[0] == '[':
				section = strings.ToLower(strings.Trim(line, "[] \t"))
			case section == "nfsd":
				k, v, ok := strings.Cut(line, "=")
				if !ok {
					break
				}
				switch strings.ToLower(strings.TrimSpace(k)) {
				case "rdma":
					rdma, where = strings.TrimSpace(v), fmt.Sprintf("/%s:%d", f, n)
				case "rdma-port":
					rdmaPort = strings.TrimSpace(v)
				}
			}
			return true
		})
	}
	c := nfsRDMAConfig{where: where}
	port := ""
	switch b, isBool := parseConfBool(rdma); {
	case isBool && b:
		c.enabled, port = true, rdmaPort
	case !isBool && rdma != "":
		c.enabled, port = true, rdma // the older rdma=PORT
	}
	c.port = d.servicePort(port)
	return c
}

// parseConfBool reads nfs.conf booleans as nfs-utils' conf_get_bool does.
func parseConfBool(v string) (value, isBool bool) {
	switch strings.ToLower(v) {
	case "1", "t", "true", "y", "yes", "on":
		return true, true
	case "0", "f", "false", "n", "no", "off":
		return false, true
	}
	return false, false
}

// servicePort turns a port or service name into a number: /etc/services,
// else nfsrdma's 20049.
func (d *diag) servicePort(p string) int {
	if p == "" || p == "nfsrdma" {
		return nfsRDMAPort
	}
	if n, err := strconv.Atoi(p); err == nil {
		return n
	}
	port := nfsRDMAPort
	_ = boundedLines(d.h, "etc/services", capConfig, func(line string) bool {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == p {
			if num, _, ok := strings.Cut(f[1], "/"); ok {
				if n, err := strconv.Atoi(num); err == nil {
					port = n
					return false
				}
			}
		}
		return true
	})
	return port
}

// nfsdListening says whether nfsd serves RDMA on port: /proc/fs/nfsd/portlist
// lists "rdma PORT" for each RDMA listener (an RDMA-CM listener on
// InfiniBand or RoCE is no TCP socket), and an iWARP listener also shows as
// a TCP socket in LISTEN state. running is false when nfsd's file system
// is not there at all.
func (d *diag) nfsdListening(port int) (listening, running bool) {
	err := boundedLines(d.h, "proc/fs/nfsd/portlist", capAttr*4, func(line string) bool {
		f := strings.Fields(line)
		if len(f) == 2 && strings.HasPrefix(f[0], "rdma") && f[1] == strconv.Itoa(port) {
			listening = true
			return false
		}
		return true
	})
	running = err == nil
	return listening || d.tcpListening(port), running
}

// tcpListening looks for a LISTEN (0A) socket on port in /proc/net/tcp and
// tcp6. The kernel lists listening sockets first, so parsing stops at the
// first socket in another state.
func (d *diag) tcpListening(port int) bool {
	want := fmt.Sprintf(":%04X", port)
	found := false
	for _, table := range []string{"proc/net/tcp", "proc/net/tcp6"} {
		_ = boundedLines(d.h, table, capIndex, func(line string) bool {
			f := strings.Fields(line)
			if len(f) < 4 || f[0] == "sl" {
				return true
			}
			if f[3] != "0A" {
				return false
			}
			if strings.HasSuffix(f[1], want) {
				found = true
				return false
			}
			return true
		})
		if found {
			return true
		}
	}
	return false
}

// checkNFS: NFS over RDMA as the server guides set it up: enabled in
// /etc/nfs.conf, svcrdma loaded, nfsd listening on the port.
func (d *diag) checkNFS() {
	c := d.nfsConfig()
	listening, running := d.nfsdListening(c.port)
	where := ""
	if c.where != "" {
		where = " (" + c.where + ")"
	}
	switch {
	case !c.enabled && listening:
		d.warn("nfs-rdma-not-persistent", hostSubject,
			fmt.Sprintf("nfsd listens for NFS over RDMA on port %d, but /etc/nfs.conf does not enable it: it stops at the next restart of nfs-server", c.port),
			fmt.Sprintf("set rdma=y and rdma-port=%d in [nfsd] of /etc/nfs.conf", c.port))
	case !c.enabled:
		d.ok("nfs-rdma-off", hostSubject, "NFS over RDMA is not enabled on this host ([nfsd] rdma in /etc/nfs.conf)")
	case len(d.missingModules("svcrdma")) > 0:
		d.fail("nfs-rdma-module-missing", hostSubject,
			fmt.Sprintf("NFS over RDMA is enabled on port %d%s, but the server module svcrdma (rpcrdma) is not loaded", c.port, where),
			"modprobe svcrdma; systemctl restart nfs-server; for every boot: svcrdma in /etc/rdma/modules/rdma.conf")
	case listening:
		d.ok("nfs-rdma", hostSubject, fmt.Sprintf("nfsd listens for NFS over RDMA on port %d%s", c.port, where))
	case !running:
		d.fail("nfs-rdma-not-listening", hostSubject,
			fmt.Sprintf("NFS over RDMA is enabled on port %d%s, but the NFS server is not running", c.port, where),
			"systemctl enable --now nfs-server")
	default:
		d.fail("nfs-rdma-not-listening", hostSubject,
			fmt.Sprintf("NFS over RDMA is enabled on port %d%s, but nfsd does not listen there", c.port, where),
			fmt.Sprintf("systemctl restart nfs-server (or now: echo 'rdma %d' > /proc/fs/nfsd/portlist)", c.port))
	}
}
