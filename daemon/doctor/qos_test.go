package doctor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

func findings(fs []doctor.Finding, id string) []doctor.Finding {
	var out []doctor.Finding
	for _, f := range fs {
		if f.ID == id {
			out = append(out, f)
		}
	}
	return out
}

// The TOS -> DSCP -> priority -> PFC table of lossless RoCE.
func TestLosslessRoCE(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	pol := parsePolicy(t, "[modules]\nenable = false\n[[roce]]\ndevice = \"mlx5_0\"\ntos = 106\n")
	k := dcbtest.New()
	k.Add("ens1f0np0")
	k.Add("ens1f1np1")
	run := func() []doctor.Finding {
		return findings(diagnose(t, root, withPolicy(pol), withDCB(k)), "roce-lossless")
	}
	// PFC off, trust pcp (no DSCP entries).
	fs := run()
	if len(fs) != 1 || fs[0].Severity != doctor.SeverityWarn || !strings.Contains(fs[0].Finding, "TOS 106 = DSCP 26") || !strings.Contains(fs[0].Finding, "trusts PCP") {
		t.Fatalf("pcp, PFC off: %+v", fs)
	}
	// Trust dscp with the default table, PFC off for 3.
	full := make([]dcb.App, 0, 64)
	for d := uint8(0); d < 64; d++ {
		full = append(full, dcb.DSCP(d, d>>3))
	}
	k.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.Apps = full })
	fs = run()
	want := "RoCE on ens1f0np0 uses TOS 106 = DSCP 26 -> priority 3, PFC off for 3: RoCE traffic is lossy"
	if len(fs) != 1 || fs[0].Severity != doctor.SeverityWarn || fs[0].Finding != want {
		t.Fatalf("dscp, PFC off: %+v", fs)
	}
	if fix := fs[0].Fix; !strings.Contains(fix, `qos = [{ device = "mlx5_0", port = 1, trust = "dscp", pfc = [3] }]`) ||
		!strings.Contains(fix, "rdmactl qos set mlx5_0/1 --trust dscp --pfc 3 --persist") {
		t.Errorf("fix: %s", fix)
	}
	// PFC on 3: lossless.
	k.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.PFC.Enabled = 0x08 })
	fs = run()
	if len(fs) != 1 || fs[0].Severity != doctor.SeverityOK || !strings.Contains(fs[0].Finding, "PFC on for 3: lossless") {
		t.Fatalf("PFC on 3: %+v", fs)
	}
	// DSCP 26 mapped to 4 while PFC is on for 3 only: lossy, and PFC is
	// on for no priority RoCE uses.
	k.Update("ens1f0np0", func(n *dcbtest.Netdev) { n.Apps = append([]dcb.App{dcb.DSCP(26, 4)}, full[:26]...) })
	all := diagnose(t, root, withPolicy(pol), withDCB(k))
	fs = findings(all, "roce-lossless")
	if len(fs) != 1 || fs[0].Severity != doctor.SeverityWarn || !strings.Contains(fs[0].Finding, "-> priority 4, PFC off for 4") ||
		!strings.Contains(fs[0].Fix, "pfc = [3, 4]") {
		t.Fatalf("26 -> 4: %+v", fs)
	}
	unused := findings(all, "roce-pfc-unused")
	if len(unused) != 1 || !strings.Contains(unused[0].Finding, "PFC is on for priorities [3] of ens1f0np0") {
		t.Errorf("pfc unused: %+v", unused)
	}
	// No DCB on the netdev, or no reader: nothing to say.
	k.AddNoDCB("ens1f0np0")
	if fs := run(); len(fs) != 0 {
		t.Errorf("no DCB: %+v", fs)
	}
}

func TestQoSOwnerAndVFFindings(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	pol := parsePolicy(t, "[modules]\nenable = false\n[[roce]]\ndevice = \"*\"\ntos = 106\n[[qos]]\ndevice = \"*\"\npfc = [3]\n")
	k := dcbtest.New()
	k.Add("ens1f0np0").DCBX = dcb.CapLLDManaged | dcb.CapVerIEEE
	if err := os.MkdirAll(filepath.Join(root, "sys/class/infiniband/mlx5_1/device/physfn"), 0o755); err != nil {
		t.Fatal(err)
	}
	all := diagnose(t, root, withPolicy(pol), withDCB(k))
	owner := findings(all, "qos-owner")
	if len(owner) != 1 || owner[0].Severity != doctor.SeverityWarn || !strings.Contains(owner[0].Finding, "managed by the adapter's firmware") {
		t.Errorf("owner: %+v", owner)
	}
	vf := findings(all, "qos-vf")
	if len(vf) != 1 || vf[0].Severity != doctor.SeverityOK || !strings.Contains(vf[0].Finding, "mlx5_1/1") {
		t.Errorf("vf: %+v", vf)
	}
}

func TestInitramfsOlderThanMLX4Options(t *testing.T) {
	root := readyIB(t)
	hosttest.Write(t, root, "etc/initramfs-tools/modules", "mlx4_en\n")
	hosttest.Write(t, root, "etc/modprobe.d/rdmad-mlx4-pfc.conf", "# Managed by rdmad\noptions mlx4_en pfctx=0x08 pfcrx=0x08\n")
	touch(t, root, "etc/modprobe.d/rdmad-mlx4-pfc.conf", time.Now().Add(time.Minute))
	mustFix(t, diagnose(t, root), "qos-mlx4-initramfs-stale", "host", doctor.SeverityWarn,
		"mlx4_en loads from the initramfs (/etc/initramfs-tools/modules lists mlx4_en)", "update-initramfs -u -k 6.1.0-28-amd64")
	// Rebuilt since: nothing to say.
	touch(t, root, "boot/initrd.img-6.1.0-28-amd64", time.Now().Add(time.Hour))
	if f := find(diagnose(t, root), "qos-mlx4-initramfs-stale", "host"); f != nil {
		t.Errorf("after the rebuild: %+v", f)
	}
}

// Who owns a netdev's DCB matters to a [[qos]] rule whether or not the
// port has a TOS: a rule on a firmware-managed netdev is never written.
func TestQoSOwnerWithoutTOS(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	pol := parsePolicy(t, "[modules]\nenable = false\n[[qos]]\ndevice = \"mlx5_0\"\npfc = [3]\n")
	k := dcbtest.New()
	k.Add("ens1f0np0").DCBX = dcb.CapLLDManaged | dcb.CapVerIEEE
	k.Add("ens1f1np1")
	all := diagnose(t, root, withPolicy(pol), withDCB(k))
	if owner := findings(all, "qos-owner"); len(owner) != 1 || owner[0].Severity != doctor.SeverityWarn {
		t.Errorf("owner: %+v", owner)
	}
	if fs := findings(all, "roce-lossless"); len(fs) != 0 {
		t.Errorf("a port without a TOS has no RoCE traffic class to judge: %+v", fs)
	}
}
