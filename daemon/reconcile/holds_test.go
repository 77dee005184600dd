package reconcile_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
)

// While a caller holds roce_tos of mlx5_0/1, no pass writes it, forced or
// not (a correction, a reload, the device's arrival): the record says it
// differs, with the hold as the reason, and the kernel's value. Another
// setting and another port are corrected as before; once the hold ends the
// next read corrects it.
func TestHeldSettingIsNotWritten(t *testing.T) {
	e := newDriftEnv(t, config.DriftCorrect)
	port := reconcile.PortSubject("mlx5_0", 1)
	tosSetting, ok := e.r.PortSetting("roce_tos")
	if !ok || tosSetting != roce.TOS.Setting() {
		t.Fatalf("PortSetting(roce_tos) = %v, %v", tosSetting, ok)
	}
	if _, ok := e.r.PortSetting("memlock"); ok {
		t.Error("PortSetting knows a setting no device part keeps")
	}
	since := time.Unix(1_800_000_100, 0)
	if err := e.r.HoldCorrections(reconcile.Hold{Subject: port, Settings: []*reconcile.Setting{tosSetting}, Holder: "the bus name :1.7", Since: since}); err != nil {
		t.Fatal(err)
	}
	e.tamper(t, "0")
	writes := e.k.WriteCount()
	for _, scope := range []reconcile.Scope{
		{Recheck: map[string]bool{"mlx5_0": true}}, // a notification
		{Full: true, Forced: true},                 // a reload
		{Devices: map[string][]int{"mlx5_0": nil}}, // an arrival
	} {
		e.r.Pass(context.Background(), e.pol, scope)
		if e.k.WriteCount() != writes {
			t.Fatalf("a pass (%+v) wrote a held setting: %v", scope, e.k.Writes[writes:])
		}
		r := e.record(t)
		var held *reconcile.HeldError
		if got, _ := roce.TOS.Observed(r); r.State != reconcile.Differs || got != 0 || !errors.As(r.Why, &held) || held.Hold.Holder != "the bus name :1.7" {
			t.Fatalf("record of a held setting: %+v", r)
		}
	}
	if hs := e.r.Snapshot().Holds; len(hs) != 1 || hs[0].Subject != port || hs[0].SettingNames()[0] != "roce_tos" || !hs[0].Since.Equal(since) {
		t.Errorf("holds in the state: %+v", hs)
	}
	// Holding again replaces the settings and keeps the first Since.
	if err := e.r.HoldCorrections(reconcile.Hold{Subject: port, Settings: []*reconcile.Setting{roce.Mode.Setting(), tosSetting}, Holder: "the bus name :1.7", Since: since.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if hs := e.r.Holds(); len(hs) != 1 || len(hs[0].Settings) != 2 || !hs[0].Since.Equal(since) {
		t.Errorf("holds after a second hold: %+v", hs)
	}
	if e.r.ReleaseCorrections("the bus name :1.8", port) {
		t.Error("another caller released the hold")
	}
	if !e.r.ReleaseCorrections("the bus name :1.7", port) || len(e.r.Holds()) != 0 {
		t.Fatal("the holder could not release its hold")
	}
	e.recheck()
	if got := hosttest.Read(t, e.root, tosAttr); got != "106" {
		t.Errorf("TOS after the hold ended and a read: %q, want 106 put back", got)
	}
}

// A holder that leaves ends all of its holds and only its own.
func TestReleaseHolder(t *testing.T) {
	e := newDriftEnv(t, config.DriftCorrect)
	tosSetting := roce.TOS.Setting()
	for _, h := range []reconcile.Hold{
		{Subject: reconcile.PortSubject("mlx5_0", 1), Settings: []*reconcile.Setting{tosSetting}, Holder: "a"},
		{Subject: reconcile.PortSubject("mlx5_0", 2), Settings: []*reconcile.Setting{tosSetting}, Holder: "a"},
		{Subject: reconcile.PortSubject("mlx5_0", 1), Settings: []*reconcile.Setting{tosSetting}, Holder: "b"},
	} {
		if err := e.r.HoldCorrections(h); err != nil {
			t.Fatal(err)
		}
	}
	got := e.r.ReleaseHolder("a")
	if len(got) != 2 || got[0] != reconcile.PortSubject("mlx5_0", 1) || got[1] != reconcile.PortSubject("mlx5_0", 2) {
		t.Errorf("released ports %v", got)
	}
	if hs := e.r.Holds(); len(hs) != 1 || hs[0].Holder != "b" {
		t.Errorf("holds left: %+v", hs)
	}
	if got := e.r.ReleaseAll(); len(got) != 1 || len(e.r.Holds()) != 0 {
		t.Errorf("ReleaseAll released %v, left %v", got, e.r.Holds())
	}
}
