package bus_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
	"github.com/rdmad/rdmad/test/testdeps"
)

const mlx5Config = `
[modules]
enable = false
`

// bins are rdmad and rdmactl built from this tree: the bus tests drive the
// daemon through the rdmactl binary users run.
var bins livetest.Binaries

func TestMain(m *testing.M) {
	if spec := os.Getenv(callerEnv); spec != "" {
		os.Exit(runCaller(spec))
	}
	livetest.Main(m, &bins)
}

// rdmactl runs the real rdmactl against addr and returns its exit code,
// stdout and stderr.
func rdmactl(t *testing.T, addr string, args ...string) (int, string, string) {
	t.Helper()
	return rdmactlStdin(t, addr, "", args...)
}

// rdmactlStdin runs the real rdmactl against addr with stdin as its
// standard input (a pipe, as a shell or Ansible gives it).
func rdmactlStdin(t *testing.T, addr, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(bins.Rdmactl, append([]string{"--bus", addr}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	case err != nil:
		t.Fatalf("rdmactl %v: %v", args, err)
	}
	return 0, out.String(), errb.String()
}

// roceRow is one line of `rdmactl -o json roce show`, as its users decode it.
type roceRow struct {
	Port        string `json:"port"`
	Mode        string `json:"mode"`
	TOS         int32  `json:"tos"`
	DesiredMode string `json:"desired_mode"`
	DesiredTOS  int32  `json:"desired_tos"`
	Source      string `json:"source"`
}

// TestContractMatchesServedObjects introspects the live objects over the
// bus and compares them with org.rdmad1.xml in both directions.
func TestContractMatchesServedObjects(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config)
	conn := dialT(t, e.addr)
	c := dbusapi.TheContract()
	for _, tc := range []struct {
		path  dbus.ObjectPath
		iface string
	}{
		{dbusapi.RootPath, dbusapi.ManagerIface},
		{dbusapi.DevicePath("mlx5_0"), dbusapi.DeviceIface},
		{dbusapi.PortPath("mlx5_0", 1), dbusapi.PortIface},
	} {
		var x string
		if err := conn.Object(dbusapi.BusName, tc.path).Call("org.freedesktop.DBus.Introspectable.Introspect", 0).Store(&x); err != nil {
			t.Fatalf("introspect %s: %v", tc.path, err)
		}
		served, err := dbusapi.ParseContract([]byte(x))
		if err != nil {
			t.Fatalf("served XML of %s: %v", tc.path, err)
		}
		si, ci := served.Interface(tc.iface), c.Interface(tc.iface)
		if si == nil || ci == nil {
			t.Fatalf("%s: interface %s served=%v in contract=%v", tc.path, tc.iface, si != nil, ci != nil)
		}
		for _, cm := range ci.Members {
			sm := si.Member(cm.Kind, cm.Name)
			if sm == nil {
				t.Errorf("%s: contract %s %s.%s is not served", tc.path, cm.Kind, tc.iface, cm.Name)
				continue
			}
			if sm.Type != cm.Type || sm.Access != cm.Access {
				t.Errorf("%s: %s.%s served as %s/%s, contract says %s/%s", tc.path, tc.iface, cm.Name, sm.Type, sm.Access, cm.Type, cm.Access)
			}
			if !sameArgs(sm.Args, cm.Args) {
				t.Errorf("%s: %s.%s served args %v, contract %v", tc.path, tc.iface, cm.Name, sm.Args, cm.Args)
			}
		}
		for _, sm := range si.Members {
			if ci.Member(sm.Kind, sm.Name) == nil {
				t.Errorf("%s: served %s %s.%s is missing from org.rdmad1.xml", tc.path, sm.Kind, tc.iface, sm.Name)
			}
		}
	}
}

func sameArgs(a, b []introspect.Arg) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		da, db := a[i].Direction, b[i].Direction
		if da == "" {
			da = "in"
		}
		if db == "" {
			db = "in"
		}
		if a[i].Name != b[i].Name || a[i].Type != b[i].Type || da != db {
			return false
		}
	}
	return true
}

func TestContractIsDocumented(t *testing.T) {
	c := dbusapi.TheContract()
	if len(c.Interfaces) != 3 {
		t.Fatalf("want 3 interfaces, got %d", len(c.Interfaces))
	}
	for _, i := range c.Interfaces {
		if i.Doc == "" {
			t.Errorf("interface %s has no documentation comment", i.Name)
		}
		for _, m := range i.Members {
			if !strings.HasPrefix(m.Doc, m.Name+":") {
				t.Errorf("%s %s.%s: documentation must start with %q, got %q", m.Kind, i.Name, m.Name, m.Name+":", m.Doc)
			}
		}
	}
}

func TestSetRoCEEmitsPropertiesChanged(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config)
	watch := dialT(t, e.addr)
	port := dbusapi.PortPath("mlx5_0", 1)
	if err := watch.AddMatchSignal(dbus.WithMatchObjectPath(port), dbus.WithMatchInterface("org.freedesktop.DBus.Properties")); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan *dbus.Signal, 16)
	watch.Signal(sigs)

	code, _, stderr := rdmactl(t, e.addr, "roce", "set", "mlx5_0/1", "--mode", "v1", "--tos", "106")
	if code != 0 {
		t.Fatalf("roce set: exit %d: %s", code, stderr)
	}
	if got := e.read(t, "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_mode"); got != "IB/RoCE v1" {
		t.Errorf("configfs mode = %q", got)
	}
	if got := e.read(t, "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos"); got != "106" {
		t.Errorf("configfs tos = %q", got)
	}
	sig := waitSignal(t, sigs, "org.freedesktop.DBus.Properties.PropertiesChanged")
	if sig.Body[0] != dbusapi.PortIface {
		t.Fatalf("PropertiesChanged for %v", sig.Body[0])
	}
	changed := sig.Body[1].(map[string]dbus.Variant)
	if v := changed["RoCEMode"]; v.Value() != "IB/RoCE v1" {
		t.Errorf("RoCEMode in signal = %v (changed: %v)", v, changed)
	}
	if v := changed["DesiredRoCETOS"]; v.Value() != int32(106) {
		t.Errorf("DesiredRoCETOS in signal = %v", v)
	}
	// roce show reflects it, and the change is runtime only.
	code, out, _ := rdmactl(t, e.addr, "-o", "json", "roce", "show", "mlx5_0/1")
	var rows []roceRow
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 {
		t.Fatalf("roce show: exit %d, %q", code, out)
	}
	if rows[0].Mode != "IB/RoCE v1" || rows[0].TOS != 106 || rows[0].Source != "runtime" {
		t.Errorf("roce show = %+v", rows[0])
	}
	if _, err := os.Stat(filepath.Join(e.root, "etc/rdma/rdmad.d/zz-rdmad-persist.toml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("runtime change wrote the drop-in: %v", err)
	}
	// A runtime change survives a reload.
	if code, _, stderr := rdmactl(t, e.addr, "reload"); code != 0 {
		t.Fatalf("reload: %s", stderr)
	}
	code, out, _ = rdmactl(t, e.addr, "-o", "json", "roce", "show", "mlx5_0/1")
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || rows[0].DesiredMode != "v1" {
		t.Errorf("after reload: %q", out)
	}
}

func waitSignal(t *testing.T, ch chan *dbus.Signal, name string) *dbus.Signal {
	t.Helper()
	deadline := time.After(10 * time.Second) // a hang guard, not a speed assertion
	for {
		select {
		case s := <-ch:
			if s.Name == name {
				return s
			}
		case <-deadline:
			t.Fatalf("no %s signal", name)
		}
	}
}

func TestInterfacesAddedAndRemoved(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config)
	watch := dialT(t, e.addr)
	if err := watch.AddMatchSignal(dbus.WithMatchInterface("org.freedesktop.DBus.ObjectManager")); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan *dbus.Signal, 16)
	watch.Signal(sigs)
	class := filepath.Join(e.root, "sys/class/infiniband")
	if err := os.Rename(filepath.Join(class, "mlx5_1"), filepath.Join(e.dir, "mlx5_1.away")); err != nil {
		t.Fatal(err)
	}
	e.d.svc.ReconcileNow(t.Context())
	s := waitSignal(t, sigs, "org.freedesktop.DBus.ObjectManager.InterfacesRemoved")
	if s.Path != dbusapi.RootPath || s.Body[0] != dbusapi.PortPath("mlx5_1", 1) {
		t.Errorf("first removal: %v from %s (want the port first)", s.Body, s.Path)
	}
	s = waitSignal(t, sigs, "org.freedesktop.DBus.ObjectManager.InterfacesRemoved")
	if s.Body[0] != dbusapi.DevicePath("mlx5_1") || s.Body[0] != dbus.ObjectPath("/org/rdmad1/devices/mlx5_5f1") {
		t.Errorf("second removal: %v", s.Body)
	}
	if err := os.Rename(filepath.Join(e.dir, "mlx5_1.away"), filepath.Join(class, "mlx5_1")); err != nil {
		t.Fatal(err)
	}
	e.d.svc.ReconcileNow(t.Context())
	s = waitSignal(t, sigs, "org.freedesktop.DBus.ObjectManager.InterfacesAdded")
	if s.Body[0] != dbusapi.DevicePath("mlx5_1") {
		t.Fatalf("added: %v", s.Body[0])
	}
	props := s.Body[1].(map[string]map[string]dbus.Variant)[dbusapi.DeviceIface]
	if props["Name"].Value() != "mlx5_1" {
		t.Errorf("InterfacesAdded props: %v", props)
	}
}

func TestPersistedChangeSurvivesRestart(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config)
	if code, _, stderr := rdmactl(t, e.addr, "roce", "set", "mlx5_1", "--tos", "42", "--persist"); code != 0 {
		t.Fatalf("roce set --persist: %s", stderr)
	}
	drop, err := os.ReadFile(filepath.Join(e.root, "etc/rdma/rdmad.d/zz-rdmad-persist.toml"))
	if err != nil || !strings.Contains(string(drop), "tos = 42") {
		t.Fatalf("drop-in: %v %q", err, drop)
	}
	e.d.stop()
	// What a reboot does to configfs: back to the default.
	tosFile := filepath.Join(e.root, "sys/kernel/config/rdma_cm/mlx5_1/ports/1/default_roce_tos")
	if err := os.WriteFile(tosFile, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.d = startDaemon(t, e.addr, e.root)
	if got := e.read(t, "sys/kernel/config/rdma_cm/mlx5_1/ports/1/default_roce_tos"); got != "42" {
		t.Errorf("after restart tos = %q, want 42", got)
	}
	code, out, _ := rdmactl(t, e.addr, "-o", "json", "roce", "show", "mlx5_1/1")
	var rows []roceRow
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || !strings.Contains(rows[0].Source, "zz-rdmad-persist.toml") {
		t.Errorf("roce show after restart: %q", out)
	}
}

// TestBadArgumentsChangeNothing calls with invalid arguments and checks the
// error names the argument and that no file changed.
func TestBadArgumentsChangeNothing(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config)
	c, err := client.Connect(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := treeDigest(t, e.root)
	ctx := t.Context()
	// Malformed values are InvalidArgs; well-formed names of nothing get
	// the error naming what is missing (on the wire, as clients match it).
	for _, tc := range []struct {
		name string
		err  error
		arg  string
		want string
	}{
		{"unknown device", c.SetRoCE(ctx, "mlx9_0", 0, "v1", -1, true), "device", dbusapi.ErrNoSuchDevice},
		{"impossible device", c.SetRoCE(ctx, "../mlx5_0", 0, "v1", -1, false), "device", dbusapi.ErrInvalidArgs},
		{"port out of range", c.SetRoCE(ctx, "mlx5_0", 9, "v1", -1, true), "port", dbusapi.ErrNoSuchPort},
		{"bad mode", c.SetRoCE(ctx, "mlx5_0", 1, "v3", -1, true), "mode", dbusapi.ErrInvalidArgs},
		{"tos too big", c.SetRoCE(ctx, "mlx5_0", 1, "", 300, true), "tos", dbusapi.ErrInvalidArgs},
		{"nothing to set", c.SetRoCE(ctx, "mlx5_0", 1, "", -1, false), "mode", dbusapi.ErrInvalidArgs},
		{"bad link name", c.AddLink(ctx, "rxe/0", "rxe", "ens1f0np0", true), "name", dbusapi.ErrInvalidArgs},
		{"bad link type", c.AddLink(ctx, "rxe0", "roce", "ens1f0np0", true), "type", dbusapi.ErrInvalidArgs},
		{"missing netdev", c.AddLink(ctx, "rxe0", "rxe", "eth99", true), "netdev", dbusapi.ErrNoSuchDevice},
		{"undeclared link", c.DeleteLink(ctx, "rxe7", true), "name", dbusapi.ErrNoSuchLink},
		{"bad netns mode", c.SetNetnsMode(ctx, "private", true), "mode", dbusapi.ErrInvalidArgs},
	} {
		if got := client.ErrorName(tc.err); got != tc.want {
			t.Errorf("%s: error %s %v, want %s", tc.name, got, tc.err, tc.want)
			continue
		}
		if msg := client.ErrorMessage(tc.err); !strings.Contains(msg, "argument "+tc.arg+":") {
			t.Errorf("%s: message %q does not name argument %s", tc.name, msg, tc.arg)
		}
	}
	if after := treeDigest(t, e.root); after != before {
		t.Errorf("invalid calls changed files:\n%s", diffLines(before, after))
	}
	if code, _, stderr := rdmactl(t, e.addr, "roce", "set", "mlx5_0/1", "--mode", "v9"); code != 2 {
		t.Errorf("usage error: exit %d (%s)", code, stderr)
	}
}

func treeDigest(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(filepath.Join(root), func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(p)
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.WriteString("=" + string(data))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func diffLines(a, b string) string {
	al := map[string]bool{}
	for _, l := range strings.Split(a, "\n") {
		al[l] = true
	}
	var out []string
	for _, l := range strings.Split(b, "\n") {
		if !al[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

func TestReloadConfigErrorKeepsLastGood(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config+"\n[[roce]]\ndevice = \"mlx5_*\"\ntos = 7\n")
	if err := os.WriteFile(filepath.Join(e.root, "etc/rdma/rdmad.toml"), []byte("[[roce]]\ndevice = \"mlx5_*\"\ntos = 900\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := rdmactl(t, e.addr, "reload")
	if code != 1 || !strings.Contains(stderr, "rdmad.toml:3") {
		t.Errorf("reload with a bad file: exit %d, %q", code, stderr)
	}
	code, out, _ := rdmactl(t, e.addr, "-o", "json", "status")
	var st dbusapi.Description
	if code != 0 {
		t.Fatalf("status: exit %d", code)
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status JSON: %v\n%s", err, out)
	}
	if !strings.Contains(st.ConfigError, "rdmad.toml:3") {
		t.Errorf("config_error = %q", st.ConfigError)
	}
	if len(st.Devices) != 2 || st.Devices[0].Ports[0].DesiredRoCETOS != 7 {
		t.Errorf("last good policy not in force: %+v", st.Devices)
	}
}

func TestNotRunning(t *testing.T) {
	dir := t.TempDir()
	addr := privateBus(t, dir)
	code, _, stderr := rdmactl(t, addr, "status")
	if code != 1 || !strings.Contains(stderr, "rdmad is not running") || !strings.Contains(stderr, "org.rdmad1 has no owner") {
		t.Errorf("exit %d, %q", code, stderr)
	}
}

// TestUnprivilegedCallerAskedOfPolkit runs the real rdmactl binary as uid
// 65534: the bus authenticates it with EXTERNAL as that uid, rdmad's real
// GetConnectionUnixUser lookup sees a non-root caller and asks the fake
// polkit, whose answer decides.
func TestUnprivilegedCallerAskedOfPolkit(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another uid")
	}
	e := newEnv(t, "mlx5", mlx5Config)
	// The binary must be readable by uid 65534: livetest builds it in a
	// private temporary directory, so use a copy in the test's own.
	bin := filepath.Join(e.dir, "rdmactl")
	if b, err := os.ReadFile(bins.Rdmactl); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copy rdmactl: %v", err)
	}
	asNobody := func(args ...string) (int, string) {
		cmd := exec.Command(bin, append([]string{"--bus", e.addr}, args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		cmd.Dir = "/"
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	modeFile := "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_mode"
	before := e.read(t, modeFile)

	// No polkit on the bus: refused.
	if code, out := asNobody("roce", "set", "mlx5_0/1", "--mode", "v1"); code != 1 || !strings.Contains(out, "access denied") {
		t.Fatalf("without polkit: exit %d: %s", code, out)
	}
	// Reading needs no authorization.
	if code, out := asNobody("-o", "json", "status"); code != 0 || !json.Valid([]byte(out)) {
		t.Fatalf("status as nobody: exit %d: %s", code, out)
	}

	pk := newPolkitFake(t, e.addr)
	pk.start(t)
	pk.set([]string{bus.ActionReconcile}, false, false)
	code, out := asNobody("roce", "set", "mlx5_0/1", "--mode", "v1")
	if code != 1 || !strings.Contains(out, "access denied") {
		t.Fatalf("polkit says no: exit %d: %s", code, out)
	}
	call := waitCheck(t, pk)
	if call.Action != bus.ActionSetRoCE || call.Subject.Kind != "system-bus-name" || call.UID != nobody {
		t.Errorf("polkit asked %+v", call)
	}
	if name, _ := call.Subject.Details["name"].Value().(string); !strings.HasPrefix(name, ":") {
		t.Errorf("subject name %v is not a unique bus name", call.Subject.Details["name"])
	}
	if call.Flags != 0 {
		t.Errorf("flags %d with stdin /dev/null, not a terminal: want 0", call.Flags)
	}
	if got := e.read(t, modeFile); got != before {
		t.Errorf("refused call changed the mode to %q", got)
	}
	// On a terminal rdmactl lets polkit ask the user (its agent on that
	// terminal), unless --no-ask-password.
	if _, err := exec.LookPath("script"); err == nil {
		for _, tc := range []struct {
			flags []string
			want  uint32
		}{{nil, 1}, {[]string{"--no-ask-password"}, 0}} {
			args := append(append([]string{"--bus", e.addr}, tc.flags...), "roce", "set", "mlx5_0/1", "--mode", "v1")
			cmd := exec.Command("script", "-qec", shellQuote(append([]string{bin}, args...)), "/dev/null")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
			cmd.Dir = "/"
			out, _ := cmd.CombinedOutput()
			if c := waitCheck(t, pk); c.Flags != tc.want {
				t.Errorf("rdmactl %q on a terminal: polkit flags %d, want %d (%s)", tc.flags, c.Flags, tc.want, out)
			}
		}
	}
	// Once polkit allows the action, the same caller goes through.
	pk.set([]string{bus.ActionReconcile, bus.ActionSetRoCE}, false, false)
	if code, out := asNobody("roce", "set", "mlx5_0/1", "--mode", "v1"); code != 0 {
		t.Fatalf("polkit says yes: exit %d: %s", code, out)
	}
	if call := waitCheck(t, pk); call.Action != bus.ActionSetRoCE {
		t.Errorf("polkit asked %+v", call)
	}
	if got := e.read(t, modeFile); got != "IB/RoCE v1" {
		t.Errorf("allowed call: mode %q", got)
	}
}

// shellQuote quotes args for sh.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func TestBusctlAndJSONStatus(t *testing.T) {
	testdeps.Tool(t, "busctl", "systemd")
	e := newEnv(t, "mlx5", mlx5Config)
	out, err := exec.Command("busctl", "--address="+e.addr, "introspect", "org.rdmad1", "/org/rdmad1/devices/mlx5_5f0").CombinedOutput()
	if err != nil {
		t.Fatalf("busctl introspect: %v\n%s", err, out)
	}
	for _, m := range dbusapi.TheContract().Interface(dbusapi.DeviceIface).Members {
		if !strings.Contains(string(out), "."+m.Name+" ") {
			t.Errorf("busctl introspect lacks %s:\n%s", m.Name, out)
		}
	}
	out, err = exec.Command("busctl", "--address="+e.addr, "tree", "org.rdmad1").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "/org/rdmad1/devices/mlx5_5f1/ports/1") {
		t.Errorf("busctl tree: %v\n%s", err, out)
	}
	code, js, _ := rdmactl(t, e.addr, "-o", "json", "status")
	var st map[string]any
	if code != 0 || json.Unmarshal([]byte(js), &st) != nil {
		t.Fatalf("status -o json: exit %d: %s", code, js)
	}
	for _, k := range []string{"version", "devices", "last_result", "config_error", "actions", "runtime"} {
		if _, ok := st[k]; !ok {
			t.Errorf("status JSON lacks %q", k)
		}
	}
	code, text, _ := rdmactl(t, e.addr, "status")
	if code != 0 || !strings.Contains(text, "mlx5_0/1") || !strings.Contains(text, "state ACTIVE") {
		t.Errorf("status text:\n%s", text)
	}
}

// rdmactl -o json status prints the Describe document, byte for byte.
func TestStatusJSONIsDescribe(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config+"\n[[roce]]\ndevice = \"mlx5_*\"\ntos = 7\n")
	c, err := client.Connect(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	doc, err := c.Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ := rdmactl(t, e.addr, "-o", "json", "status")
	if code != 0 || out != doc+"\n" {
		t.Errorf("status -o json (exit %d) differs from Describe:\n%s\n---\n%s", code, out, doc)
	}
	var d dbusapi.Description
	if err := json.Unmarshal([]byte(doc), &d); err != nil || len(d.Devices) != 2 || d.Devices[0].Ports[0].DesiredRoCETOS != 7 {
		t.Errorf("Describe = %+v, %v", d, err)
	}
	found := false
	for _, a := range d.Actions {
		if a.Subject.Kind == "port" && a.Subject.Device == "mlx5_0" && a.Subject.Port == 1 && a.Kind == "roce tos" {
			found = true
		}
	}
	if !found {
		t.Errorf("Describe actions lack the typed tos action of mlx5_0/1: %+v", d.Actions)
	}
}

// A call whose arguments do not have the contract's signature is refused
// before anything happens: godbus would narrow a 64-bit port of 2^32+1 to
// the uint32 1.
func TestCallWithWrongSignatureIsRefused(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config)
	conn := dialT(t, e.addr)
	before := treeDigest(t, e.root)
	obj := conn.Object(dbusapi.BusName, dbusapi.RootPath)
	for _, args := range [][]any{
		{"mlx5_0", uint64(1<<32 + 1), "v1", int32(-1), false},
		{"mlx5_0", uint32(1), "v1", int64(5), false},
		{"mlx5_0", int32(1), "v1", int32(5), false},
		{"mlx5_0", uint32(1), "v1", int32(5), "yes"},
	} {
		err := obj.Call(dbusapi.ManagerIface+".SetRoCE", 0, args...).Err
		if client.ErrorName(err) != dbusapi.ErrInvalidArgs {
			t.Errorf("SetRoCE%v = %v, want InvalidArgs", args, err)
		}
	}
	if err := obj.Call(dbusapi.ManagerIface+".Describe", 0, "extra").Err; client.ErrorName(err) != dbusapi.ErrInvalidArgs {
		t.Errorf("Describe with an argument = %v", err)
	}
	if after := treeDigest(t, e.root); after != before {
		t.Errorf("calls with wrong signatures changed files:\n%s", diffLines(before, after))
	}
	// rdmactl refuses a port it cannot send as a uint32.
	if code, _, stderr := rdmactl(t, e.addr, "roce", "set", "mlx5_0/4294967297", "--tos", "5"); code != 2 {
		t.Errorf("rdmactl with port 2^32+1: exit %d (%s)", code, stderr)
	}
}

// A byte that is not UTF-8, or a NUL, in a sysfs attribute is published
// escaped: every reader keeps working and nothing is lost.
func TestNonUTF8HostStringsArePublishedEscaped(t *testing.T) {
	dir := bustest.PublicDir(t)
	addr := privateBus(t, dir)
	root := fixture(t, dir, "mlx5", mlx5Config)
	fw := filepath.Join(root, "sys/class/infiniband/mlx5_0/fw_ver")
	if err := os.WriteFile(fw, []byte("16.35\xff\x00x\\y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, addr, root)
	conn := dialT(t, addr)
	objs := managedObjects(t, conn)
	got := objs[dbusapi.DevicePath("mlx5_0")][dbusapi.DeviceIface]["FirmwareVersion"].Value()
	if got != `16.35\xff\x00x\\y` {
		t.Errorf("FirmwareVersion = %q", got)
	}
	if dbusapi.Unescape(got.(string)) != "16.35\xff\x00x\\y" {
		t.Errorf("escaping lost bytes: %q", dbusapi.Unescape(got.(string)))
	}
	code, out, errOut := rdmactl(t, addr, "status")
	if code != 0 || !strings.Contains(out, "mlx5_0/1") {
		t.Errorf("rdmactl status with a bad byte: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := rdmactl(t, addr, "-o", "json", "status"); code != 0 || !json.Valid([]byte(out)) {
		t.Errorf("status -o json: exit %d", code)
	}
}

// A pass over one device emits signals for that device's objects only.
func TestSignalsOnlyForChangedObjects(t *testing.T) {
	e := newEnv(t, "mlx5", mlx5Config)
	conn := dialT(t, e.addr)
	if err := conn.AddMatchSignal(dbus.WithMatchInterface("org.freedesktop.DBus.Properties")); err != nil {
		t.Fatal(err)
	}
	ch := make(chan *dbus.Signal, 64)
	conn.Signal(ch)
	if code, _, stderr := rdmactl(t, e.addr, "roce", "set", "mlx5_1/1", "--tos", "12"); code != 0 {
		t.Fatalf("roce set: %s", stderr)
	}
	waitSignal(t, ch, "org.freedesktop.DBus.Properties.PropertiesChanged")
	deadline := time.After(300 * time.Millisecond)
	for {
		select {
		case sig := <-ch:
			if strings.Contains(string(sig.Path), "mlx5_5f0") {
				t.Errorf("signal for untouched mlx5_0: %s %v", sig.Path, sig.Body)
			}
		case <-deadline:
			return
		}
	}
}

// rdmactl doctor asks the daemon, which diagnoses its own --root host: a
// healthy Soft-RoCE host passes (exit 0), the demo host's failures (its
// providers removed) come back with a fix each (exit 1), and -o json is the
// Diagnose document.
func TestDoctorThroughTheDaemon(t *testing.T) {
	ready := newEnv(t, "rxe-ready", "[modules]\nenable = false\n")
	if code, out, errOut := rdmactl(t, ready.addr, "doctor"); code != 0 {
		t.Errorf("doctor on rxe-ready: exit %d\n%s%s", code, out, errOut)
	}
	e := newEnv(t, "demo", mlx5Config)
	// Without rdma-core's provider files, libibverbs finds no device.
	if err := os.RemoveAll(filepath.Join(e.root, "etc/libibverbs.d")); err != nil {
		t.Fatal(err)
	}
	code, out, _ := rdmactl(t, e.addr, "-o", "json", "doctor")
	if code != 1 {
		t.Fatalf("doctor on demo without providers: exit %d, want 1\n%s", code, out)
	}
	c, err := client.Connect(e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	doc, err := c.Diagnose(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if out != doc+"\n" {
		t.Errorf("doctor -o json differs from Diagnose")
	}
	fs, err := dbusapi.DecodeFindings(doc)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, f := range fs {
		ids[f.ID] = true
		if f.Severity != dbusapi.SeverityOK && f.Fix == "" {
			t.Errorf("%s has no fix", f.ID)
		}
	}
	for _, want := range []string{"verbs-providers-missing", "roce-modes-mixed"} {
		if !ids[want] {
			t.Errorf("demo host: no %s finding in %v", want, ids)
		}
	}
}
