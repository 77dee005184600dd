package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// rdmactl monitor prints rdmad's signals one line each, as text and as
// JSON: a correction as it comes (the port's properties changing, the
// correction, the value back), a contest, a device and a port coming and
// going, the Manager's last reconcile, and rdmad leaving the bus.
func TestGoldenMonitor(t *testing.T) {
	port := dbusapi.PortPath("mlx5_0", 1)
	settings := func(observed, state string) []dbusapi.Setting {
		return []dbusapi.Setting{
			{Name: "roce_mode", Title: "RoCE mode", Declared: "RoCE v2", Source: "/etc/rdma/rdmad.d/50-roce.toml:3", Observed: "RoCE v2", State: "holds"},
			{Name: "roce_tos", Title: "RoCE TOS", Declared: "106", Source: "/etc/rdma/rdmad.d/50-roce.toml:3", Observed: observed, State: state},
		}
	}
	for _, format := range []string{"", "-j "} {
		f := fixture()
		f.devices[1].Ports[0].Settings = settings("106", "holds")
		f.objectsRead = make(chan struct{}, 1)
		addr := serveFake(t, f)
		type result struct {
			code      int
			out, errs string
		}
		done := make(chan result, 1)
		args := format + "monitor -n 8"
		go func() {
			code, out, errs := runCLI(addr, strings.Fields(args)...)
			done <- result{code, out, errs}
		}()
		select {
		case <-f.objectsRead:
		case r := <-done:
			t.Fatalf("%s ended before it read the objects: exit %d\n%s%s", args, r.code, r.out, r.errs)
		case <-time.After(20 * time.Second): // a hang guard
			t.Fatalf("%s never read the objects", args)
		}
		emit := func(path dbus.ObjectPath, name string, body ...any) {
			t.Helper()
			if err := f.conn.Emit(path, name, body...); err != nil {
				t.Fatal(err)
			}
		}
		props := "org.freedesktop.DBus.Properties.PropertiesChanged"
		emit(port, props, dbusapi.PortIface, map[string]dbus.Variant{"RoCETOS": dbus.MakeVariant(int32(0)),
			"Settings": dbus.MakeVariant(settings("0", "differs")), "Drift": dbus.MakeVariant(map[string]bool{"roce_mode": false, "roce_tos": true})}, []string{})
		emit(dbusapi.RootPath, dbusapi.ManagerIface+".SettingCorrected", port, "roce_tos", "0", "106")
		emit(port, props, dbusapi.PortIface, map[string]dbus.Variant{"RoCETOS": dbus.MakeVariant(int32(106)),
			"Settings": dbus.MakeVariant(settings("106", "holds")), "Corrected": dbus.MakeVariant(map[string]uint32{"roce_tos": 1})}, []string{})
		emit(dbusapi.RootPath, dbusapi.ManagerIface+".SettingContested", port, "qos_pfc", uint32(5))
		emit(dbusapi.RootPath, "org.freedesktop.DBus.ObjectManager.InterfacesAdded", dbusapi.DevicePath("mlx5_1"),
			map[string]map[string]dbus.Variant{dbusapi.DeviceIface: dbusapi.ToProps(dbusapi.Device{Name: "mlx5_1"})})
		emit(dbusapi.RootPath, "org.freedesktop.DBus.ObjectManager.InterfacesRemoved", dbusapi.PortPath("rxe0", 1), []string{dbusapi.PortIface})
		emit(dbusapi.RootPath, props, dbusapi.ManagerIface, map[string]dbus.Variant{"LastReconcile": dbus.MakeVariant(fixtureReconcile + 61e6)}, []string{})
		if _, err := f.conn.ReleaseName(dbusapi.BusName); err != nil {
			t.Fatal(err)
		}
		var r result
		select {
		case r = <-done:
		case <-time.After(20 * time.Second): // a hang guard
			t.Fatalf("%s did not end after 8 lines", args)
		}
		golden(t, "monitor_"+goldenName(args), args, r.code, r.out, r.errs)
	}
}

// A service on the bus that sends control and bidi characters in every
// string of its signals reaches no terminal through rdmactl monitor, in
// text or JSON.
func TestMonitorEscapesWhatTheServiceSends(t *testing.T) {
	port := dbusapi.PortPath("mlx5_0", 1)
	bad := "x\x1b[2J\u009b31m\u202e"
	for _, format := range []string{"", "-j "} {
		f := fixture()
		f.devices[1].Ports[0].Settings = []dbusapi.Setting{{Name: "roce_tos", Observed: "106", State: "holds"}}
		f.objectsRead = make(chan struct{}, 1)
		addr := serveFake(t, f)
		args := format + "monitor -n 3"
		done := make(chan string, 1)
		go func() {
			_, out, errs := runCLI(addr, strings.Fields(args)...)
			done <- out + errs
		}()
		select {
		case <-f.objectsRead:
		case out := <-done:
			t.Fatalf("%s ended before it read the objects:\n%s", args, out)
		case <-time.After(20 * time.Second): // a hang guard
			t.Fatalf("%s never read the objects", args)
		}
		props := "org.freedesktop.DBus.Properties.PropertiesChanged"
		for _, sig := range []struct {
			path dbus.ObjectPath
			name string
			body []any
		}{
			{port, props, []any{dbusapi.PortIface, map[string]dbus.Variant{
				"Settings":    dbus.MakeVariant([]dbusapi.Setting{{Name: "roce_tos" + bad, Observed: bad, State: bad}}),
				"Error" + bad: dbus.MakeVariant(bad)}, []string{}}},
			{dbusapi.RootPath, dbusapi.ManagerIface + ".SettingCorrected", []any{port, "roce_tos" + bad, bad, bad}},
			{dbusapi.RootPath, dbusapi.ManagerIface + ".SettingContested", []any{port, bad, uint32(5)}},
		} {
			if err := f.conn.Emit(sig.path, sig.name, sig.body...); err != nil {
				t.Fatal(err)
			}
		}
		var out string
		select {
		case out = <-done:
		case <-time.After(20 * time.Second): // a hang guard
			t.Fatalf("%s did not end after 3 lines", args)
		}
		if m := rawControl.FindString(out); m != "" {
			t.Errorf("rdmactl %s prints the control character %q:\n%s", args, m, out)
		}
		if strings.Count(out, "\n") < 3 {
			t.Errorf("rdmactl %s printed fewer than 3 lines:\n%s", args, out)
		}
	}
}

// A contest's line says the window of its count in words, from
// dbusapi.ContestWindow: whatever the window, the words are its length.
func TestDurationWords(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Minute: "a minute", 2 * time.Minute: "2 minutes", time.Hour: "an hour", 90 * time.Minute: "90 minutes",
		time.Second: "a second", 45 * time.Second: "45 seconds", 3 * time.Hour: "3 hours", 1500 * time.Millisecond: "1.5s",
	} {
		if got := durationWords(d); got != want {
			t.Errorf("%s: %q, want %q", d, got, want)
		}
	}
	if got := durationWords(dbusapi.ContestWindow); got != "a minute" {
		t.Errorf("the contest window in words: %q; the golden outputs say a minute", got)
	}
}
