package doctor_test

import (
	"testing"

	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

const ibReadyModulesNoRPCRDMA = "configfs 1 0 - Live 0x0\nib_core 1 0 - Live 0x0\nib_cm 1 0 - Live 0x0\niw_cm 1 0 - Live 0x0\nrdma_cm 1 0 - Live 0x0\n" +
	"ib_uverbs 1 0 - Live 0x0\nrdma_ucm 1 0 - Live 0x0\nib_umad 1 0 - Live 0x0\nib_ipoib 1 0 - Live 0x0\nmlx4_core 1 0 - Live 0x0\nmlx4_ib 1 0 - Live 0x0\nsunrpc 1 0 - Live 0x0\nnfsd 1 0 - Live 0x0\n"

func TestNFSOverRDMA(t *testing.T) {
	t.Run("enabled, listening", func(t *testing.T) {
		mustFix(t, diagnose(t, readyIB(t)), "nfs-rdma", "host", doctor.SeverityOK, "nfsd listens for NFS over RDMA on port 20049 (/etc/nfs.conf:3)", "")
	})
	t.Run("server module missing", func(t *testing.T) {
		root := readyIB(t)
		hosttest.Write(t, root, "proc/modules", ibReadyModulesNoRPCRDMA)
		mustFix(t, diagnose(t, root), "nfs-rdma-module-missing", "host", doctor.SeverityFail,
			"svcrdma (rpcrdma) is not loaded", "modprobe svcrdma; systemctl restart nfs-server")
	})
	t.Run("svcrdma is an alias of the loaded rpcrdma", func(t *testing.T) {
		root := readyIB(t)
		remove(t, root, "lib/modules/6.1.0-28-amd64/modules.alias")
		// Without the alias index, the loaded rpcrdma does not answer for svcrdma.
		must(t, diagnose(t, root), "nfs-rdma-module-missing", "host")
	})
	t.Run("nfsd does not listen", func(t *testing.T) {
		root := readyIB(t)
		hosttest.Write(t, root, "proc/fs/nfsd/portlist", "tcp 2049\ntcp 2049\n")
		mustFix(t, diagnose(t, root), "nfs-rdma-not-listening", "host", doctor.SeverityFail,
			"enabled on port 20049 (/etc/nfs.conf:3), but nfsd does not listen there", "systemctl restart nfs-server")
	})
	t.Run("nfsd not running", func(t *testing.T) {
		root := readyIB(t)
		remove(t, root, "proc/fs/nfsd")
		mustFix(t, diagnose(t, root), "nfs-rdma-not-listening", "host", doctor.SeverityFail,
			"the NFS server is not running", "systemctl enable --now nfs-server")
	})
	t.Run("iWARP listener seen as a TCP socket", func(t *testing.T) {
		root := readyIB(t)
		remove(t, root, "proc/fs/nfsd")
		hosttest.Write(t, root, "proc/net/tcp6", "  sl  local_address                         remote_address                        st\n"+
			"   0: 00000000000000000000000000000000:4E51 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n")
		must(t, diagnose(t, root), "nfs-rdma", "host")
	})
	t.Run("only connected sockets on the port do not count", func(t *testing.T) {
		root := readyIB(t)
		remove(t, root, "proc/fs/nfsd")
		hosttest.Write(t, root, "proc/net/tcp", "  sl  local_address rem_address   st\n"+
			"   0: 00000000:0801 00000000:0000 0A 0:0 0:0 0 0 0 1\n"+
			"   1: 0A00020F:4E51 0A000202:C2A4 01 0:0 0:0 0 0 0 2\n")
		must(t, diagnose(t, root), "nfs-rdma-not-listening", "host")
	})
	t.Run("listening but not in nfs.conf", func(t *testing.T) {
		root := readyIB(t)
		hosttest.Write(t, root, "etc/nfs.conf", "[nfsd]\nthreads=16\n")
		mustFix(t, diagnose(t, root), "nfs-rdma-not-persistent", "host", doctor.SeverityWarn,
			"does not enable it", "set rdma=y and rdma-port=20049 in [nfsd] of /etc/nfs.conf")
	})
	t.Run("not enabled", func(t *testing.T) {
		root := readyIB(t)
		hosttest.Write(t, root, "etc/nfs.conf", "[nfsd]\nrdma=n\n[mountd]\nrdma=y\n")
		remove(t, root, "proc/fs/nfsd")
		mustFix(t, diagnose(t, root), "nfs-rdma-off", "host", doctor.SeverityOK, "not enabled", "")
	})
	t.Run("older rdma=PORT and nfs.conf.d", func(t *testing.T) {
		root := readyIB(t)
		hosttest.Write(t, root, "etc/nfs.conf", "[nfsd]\nrdma=y\n")
		hosttest.Write(t, root, "etc/nfs.conf.d/local.conf", "[NFSD]\n rdma = 20050\n")
		mustFix(t, diagnose(t, root), "nfs-rdma-not-listening", "host", doctor.SeverityFail,
			"enabled on port 20050 (/etc/nfs.conf.d/local.conf:2)", "echo 'rdma 20050' > /proc/fs/nfsd/portlist")
		hosttest.Write(t, root, "proc/fs/nfsd/portlist", "rdma 20050\n")
		must(t, diagnose(t, root), "nfs-rdma", "host")
	})
	t.Run("port by service name", func(t *testing.T) {
		root := readyIB(t)
		hosttest.Write(t, root, "etc/nfs.conf", "[nfsd]\nrdma=yes\nrdma-port=nfsrdma-alt\n")
		hosttest.Write(t, root, "etc/services", "nfs\t\t2049/tcp\nnfsrdma-alt\t20051/tcp\n")
		mustFix(t, diagnose(t, root), "nfs-rdma-not-listening", "host", doctor.SeverityFail, "port 20051", "")
	})
}
