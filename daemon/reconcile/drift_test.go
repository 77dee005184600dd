package reconcile_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Drift is what the records say: a declared setting that applies and does
// not hold, whatever the reason its part gave (differs, refused, unknown,
// contested, deferred); settings that do not apply and undeclared ones
// are not listed; every declared setting of a device that did not read
// counts as drifted. How each state comes about is the parts' (their
// tests, and TestConverge).
func TestPortDrift(t *testing.T) {
	first := numSetting.Setting()
	second := reconcile.NewSetting[num](reconcile.Setting{Name: "test_second", Kind: "test second", Key: "test.second", Title: "second"}).Setting()
	record := func(s *reconcile.Setting, st reconcile.RecordState) reconcile.Record {
		return reconcile.Record{Subject: reconcile.PortSubject("dev0", 1), Setting: s, Declared: num(1), Observed: num(1), State: st}
	}
	with := func(a, b reconcile.RecordState) func(*reconcile.PortState) {
		return func(p *reconcile.PortState) { p.Records = []reconcile.Record{record(first, a), record(second, b)} }
	}
	h := reconcile.Holds
	tests := []struct {
		name   string
		device func(ds *reconcile.DeviceState)
		port   func(p *reconcile.PortState)
		want   []reconcile.Drift
	}{
		{"declared values hold", nil, with(h, h), []reconcile.Drift{{first.Name, false}, {second.Name, false}}},
		{"differs", nil, with(reconcile.Differs, h), []reconcile.Drift{{first.Name, true}, {second.Name, false}}},
		{"refused", nil, with(h, reconcile.Refused), []reconcile.Drift{{first.Name, false}, {second.Name, true}}},
		{"unknown", nil, with(reconcile.Unknown, reconcile.Unknown), []reconcile.Drift{{first.Name, true}, {second.Name, true}}},
		{"contested", nil, with(reconcile.Contested, h), []reconcile.Drift{{first.Name, true}, {second.Name, false}}},
		{"deferred", nil, with(reconcile.Deferred, h), []reconcile.Drift{{first.Name, true}, {second.Name, false}}},
		{"device did not read", func(ds *reconcile.DeviceState) { ds.ReadError = errors.New("EIO") }, with(h, h),
			[]reconcile.Drift{{first.Name, true}, {second.Name, true}}},
		{"not applicable", nil, with(reconcile.Inapplicable, reconcile.Inapplicable), nil},
		{"one not applicable", nil, with(reconcile.Inapplicable, reconcile.Differs), []reconcile.Drift{{second.Name, true}}},
		{"nothing declared", nil, with(reconcile.Undeclared, reconcile.Undeclared), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ds reconcile.DeviceState
			ds.Name = "dev0"
			var p reconcile.PortState
			p.Number = 1
			if tc.device != nil {
				tc.device(&ds)
			}
			tc.port(&p)
			if got := ds.PortDrift(&p); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("PortDrift = %v, want %v", got, tc.want)
			}
		})
	}
}
