package bus

import (
	"fmt"
	"testing"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/dbusapi"
)

// A setting's news is about its object: a port's or a device's, a soft
// link's RDMA device, the Manager for the host and a netdev; the values
// are escaped as every string rdmad publishes is.
func TestNewsObjects(t *testing.T) {
	st := &reconcile.Setting{Name: "roce_tos"}
	for _, tc := range []struct {
		subject reconcile.Subject
		want    dbus.ObjectPath
	}{
		{reconcile.PortSubject("mlx5_0", 1), dbusapi.PortPath("mlx5_0", 1)},
		{reconcile.DeviceSubject("mlx4_0"), dbusapi.DevicePath("mlx4_0")},
		{reconcile.LinkSubject("rxe0"), dbusapi.DevicePath("rxe0")},
		{reconcile.HostSubject(), dbusapi.RootPath},
		{reconcile.NetdevSubject("ens1f0np0"), dbusapi.RootPath},
	} {
		sig := correctedSignal(reconcile.Correction{Subject: tc.subject, Setting: st, Found: "0", Restored: "106"})
		if sig.path != dbusapi.RootPath || sig.name != "org.rdmad1.Manager.SettingCorrected" || sig.args[0] != tc.want {
			t.Errorf("%s: %s %s %v", tc.subject, sig.path, sig.name, sig.args)
		}
	}
	sig := correctedSignal(reconcile.Correction{Subject: reconcile.HostSubject(), Setting: st, Found: "a\xffb\x1b[2J", Restored: "ok"})
	if sig.args[2] != `a\xffb\x1b[2J` {
		t.Errorf("found %q published as %q", "a\xffb\x1b[2J", sig.args[2])
	}
	c := contestedSignal(reconcile.ContestStart{Subject: reconcile.PortSubject("mlx5_0", 1), Setting: st, Corrections: 5})
	if fmt.Sprint(c.args) != fmt.Sprint([]any{dbusapi.PortPath("mlx5_0", 1), "roce_tos", uint32(5)}) || c.name != "org.rdmad1.Manager.SettingContested" {
		t.Errorf("SettingContested %s %v", c.name, c.args)
	}
}

// News waiting for a bus that does not read are bounded: the newest
// maxNews stay, in order, and the count of the others is told.
func TestNewsAreBounded(t *testing.T) {
	var q []signal
	lost := 0
	for i := range maxNews + 10 {
		var n int
		q, n = appendNews(q, []signal{{name: fmt.Sprint(i)}})
		lost += n
	}
	if len(q) != maxNews || lost != 10 || q[0].name != "10" || q[len(q)-1].name != fmt.Sprint(maxNews+9) {
		t.Errorf("%d kept (first %s, last %s), %d dropped", len(q), q[0].name, q[len(q)-1].name, lost)
	}
}
