package doctor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/dbusapi"
)

const mlx4Conf = "# rdma-core: <pci> <port1> <port2>\n0000:02:00.0 ib eth\n"

// RHEL's /etc/rdma/mlx4.conf and rdmad's [[vpi]] both set mlx4 port
// types: a warning naming both and who should own them; without [[vpi]]
// it is noted, with no live lines it is not mentioned.
func TestCoexistMLX4Conf(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	hosttest.Write(t, root, "etc/rdma/mlx4.conf", mlx4Conf)
	vpi := parsePolicy(t, "[[vpi]]\ndevice = \"mlx4_0\"\nport = 2\ntype = \"eth\"\n")
	fs := diagnose(t, root, withPolicy(vpi))
	mustFix(t, fs, "coexist-mlx4-conf", "host", dbusapi.SeverityWarn, "/etc/rdma/mlx4.conf (1 lines", "comment out the lines of /etc/rdma/mlx4.conf")
	if f := must(t, fs, "coexist-mlx4-conf", "host"); !strings.Contains(f.Finding, "/etc/rdma/rdmad.toml:1") || !strings.Contains(f.Fix, "remove the [[vpi]] rules") {
		t.Errorf("finding %q fix %q: want the [[vpi]] rule's file:line and both ways to hand over", f.Finding, f.Fix)
	}

	fs = diagnose(t, root, withPolicy(parsePolicy(t, "")))
	if f := must(t, fs, "coexist-mlx4-conf", "host"); f.Severity != dbusapi.SeverityOK {
		t.Errorf("mlx4.conf without [[vpi]]: %s %q, want ok", f.Severity, f.Finding)
	}
	hosttest.Write(t, root, "etc/rdma/mlx4.conf", "# only comments\n\n")
	if f := find(diagnose(t, root, withPolicy(vpi)), "coexist-mlx4-conf", "host"); f != nil {
		t.Errorf("a commented-out mlx4.conf reported: %+v", f)
	}
}

// rdma-core's rdma-load-modules@ loads the same lists as rdmad's [modules]
// when its unit is installed and the instance of a list that exists is not
// masked; masked instances or [modules] enable = false end the warning.
func TestCoexistRDMALoadModules(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	for _, f := range []string{"rdma", "roce", "infiniband"} {
		hosttest.Write(t, root, "etc/rdma/modules/"+f+".conf", "ib_uverbs\n")
	}
	for _, f := range []string{"iwarp", "opa"} { // no list: no instance counts
		_ = os.Remove(filepath.Join(root, "etc/rdma/modules/"+f+".conf"))
	}
	if f := find(diagnose(t, root, withPolicy(parsePolicy(t, ""))), "coexist-rdma-load-modules", "host"); f != nil {
		t.Fatalf("no rdma-core unit installed, yet: %+v", f)
	}
	hosttest.Write(t, root, "usr/lib/systemd/system/rdma-load-modules@.service", "[Unit]\nDescription=Load RDMA modules from /etc/rdma/modules/%I.conf\n")
	fs := diagnose(t, root, withPolicy(parsePolicy(t, "")))
	mustFix(t, fs, "coexist-rdma-load-modules", "host", dbusapi.SeverityWarn,
		"rdma-load-modules@infiniband.service, rdma-load-modules@rdma.service, rdma-load-modules@roce.service (/usr/lib/systemd/system/rdma-load-modules@.service",
		"systemctl mask rdma-load-modules@infiniband.service rdma-load-modules@rdma.service rdma-load-modules@roce.service")

	// Masking two: the third is still named.
	for _, u := range []string{"rdma", "roce"} {
		if err := os.MkdirAll(filepath.Join(root, "etc/systemd/system"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/dev/null", filepath.Join(root, "etc/systemd/system/rdma-load-modules@"+u+".service")); err != nil {
			t.Fatal(err)
		}
	}
	f := must(t, diagnose(t, root, withPolicy(parsePolicy(t, ""))), "coexist-rdma-load-modules", "host")
	if f.Severity != dbusapi.SeverityWarn || f.Fix != "give them one owner: rdmad (one batched modprobe, reported in rdmactl status): systemctl mask rdma-load-modules@infiniband.service; or rdma-core: set [modules] enable = false" {
		t.Errorf("with two instances masked: %s %q", f.Severity, f.Fix)
	}
	if err := os.Symlink("/dev/null", filepath.Join(root, "etc/systemd/system/rdma-load-modules@infiniband.service")); err != nil {
		t.Fatal(err)
	}
	if f := must(t, diagnose(t, root, withPolicy(parsePolicy(t, ""))), "coexist-rdma-load-modules", "host"); f.Severity != dbusapi.SeverityOK {
		t.Errorf("every instance masked: %s %q", f.Severity, f.Finding)
	}
	if err := os.Remove(filepath.Join(root, "etc/systemd/system/rdma-load-modules@infiniband.service")); err != nil {
		t.Fatal(err)
	}
	if f := find(diagnose(t, root, withPolicy(parsePolicy(t, "[modules]\nenable = false\n"))), "coexist-rdma-load-modules", "host"); f != nil {
		t.Errorf("[modules] enable = false, yet: %+v", f)
	}
}
