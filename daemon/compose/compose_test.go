package compose_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/dcb/dcbtest"
	"github.com/rdmad/rdmad/daemon/fixturekernel"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/links"
	"github.com/rdmad/rdmad/daemon/links/linkstest"
	"github.com/rdmad/rdmad/daemon/modules"
	"github.com/rdmad/rdmad/daemon/netns/netnstest"
	"github.com/rdmad/rdmad/daemon/qos"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
	"github.com/rdmad/rdmad/daemon/service"
)

const module = "github.com/rdmad/rdmad/"

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}

// The part packages are what the composition root builds from: its
// imports under daemon/ other than the service and the packages every
// part shares (reconcile, host, config) and the DCB codec (dcb: a kernel
// interface, like host, whose reader doctor gets through the service).
// daemon/service must not depend on
// any of them, directly or through another package: it reaches the parts
// only through the interfaces it is handed.
func TestServiceImportsNoPart(t *testing.T) {
	shared := map[string]bool{"daemon/service": true, "daemon/reconcile": true, "daemon/host": true, "daemon/config": true, "daemon/dcb": true}
	var parts []string
	for _, p := range goList(t, "-f", `{{join .Imports "\n"}}`, module+"daemon/compose") {
		if rel, ok := strings.CutPrefix(p, module); ok && strings.HasPrefix(rel, "daemon/") && !shared[rel] {
			parts = append(parts, rel)
		}
	}
	for _, want := range []string{"daemon/roce", "daemon/vpi", "daemon/links", "daemon/netns", "daemon/memlock", "daemon/modules"} {
		if !slices.Contains(parts, want) {
			t.Fatalf("compose does not import %s: the list of parts (%v) is not what this test assumes", want, parts)
		}
	}
	deps := goList(t, "-deps", module+"daemon/service")
	for _, p := range parts {
		if slices.Contains(deps, module+p) {
			t.Errorf("daemon/service depends on the part %s (go list -deps ./daemon/service)", p)
		}
	}
}

// Every kind of action has exactly one part (reconcile.New panics on two),
// and every part answers Undo for each of its kinds: either it undoes, or
// it says the action cannot be undone. Which kinds are not undoable is
// fixed here, so a new part that forgets its Undo fails this test; and no
// part guesses an old value it does not have.
func TestEveryPartUndoesOrSaysWhy(t *testing.T) {
	root := t.TempDir()
	h := host.New(root)
	build := compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}, Links: &linkstest.Netlink{Host: h}, Netns: netnstest.New(config.NetnsShared), DCB: dcbtest.New().Kernel()})
	p := build(h, false, func() {})
	var parts []reconcile.Part
	for _, x := range p.Early {
		parts = append(parts, x)
	}
	for _, x := range p.Host {
		parts = append(parts, x)
	}
	for _, x := range p.Device {
		parts = append(parts, x)
	}
	reconcile.New(reconcile.Options{Host: h, Early: p.Early, HostParts: p.Host, DeviceParts: p.Device})

	var notUndoable, undoable []string
	for _, part := range parts {
		for _, k := range part.Kinds() {
			// A changed action without an Old value: a part may only
			// refuse it, never write something it made up.
			a := reconcile.Action{Subject: reconcile.PortSubject("dev0", 1), Kind: k, Status: reconcile.Changed}
			if k == links.Create || k == links.Remove {
				a.Subject = reconcile.LinkSubject("dev0")
			}
			err := part.Undo(context.Background(), a)
			switch {
			case err == nil:
				t.Errorf("%T.Undo(%s) without an old value succeeded", part, k)
			case errors.Is(err, reconcile.ErrNotUndoable):
				notUndoable = append(notUndoable, string(k))
			default:
				undoable = append(undoable, string(k))
			}
		}
	}
	sort.Strings(notUndoable)
	want := []string{string(roce.Configfs), string(modules.Load), string(modules.ReadList)}
	sort.Strings(want)
	if !slices.Equal(notUndoable, want) {
		t.Errorf("kinds that cannot be undone: %v, want %v (undoable: %v)", notUndoable, want, undoable)
	}
	// The lossless profile's settings beyond PFC and trust are all
	// undoable from their old values.
	lossless := len((*qos.Part)(nil).Settings()) - 2
	if len(undoable) != 13+lossless {
		t.Errorf("undoable kinds: %v (want the 13 of roce mode/tos/traffic class, vpi, links, netns, memlock, qos pfc/trust/mlx4 file, and qos's %d lossless settings)", undoable, lossless)
	}
}

// Under a fixture root the event sources leave out the RDMA netlink
// monitor (its socket could load this machine's ib_core) and the DCB and
// ethtool notifications of this machine's netdevs; a fixture that carries
// its own DCB and ethtool state announces its changes instead.
func TestEventsUnderARootFollowNoKernelOfThisMachine(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	h := host.New(root)
	svc, err := service.New(service.Options{Host: h, Parts: compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}}), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range compose.Events(svc, slog.New(slog.DiscardHandler), make(chan struct{})) {
		names = append(names, name)
	}
	sort.Strings(names)
	if want := []string{"config", "directories", "fixture-kernel", "rtnetlink", "uevent"}; !slices.Equal(names, want) {
		t.Errorf("event sources under --root %s: %v, want %v", root, names, want)
	}
}

// Every setting of rdmad's parts says which of its values found.json may
// hold (reconcile.Setting.Valid): rdmad writes them back to the kernel and
// to limits.d and modprobe.d when a declaration goes.
func TestEverySettingChecksWhatFoundHolds(t *testing.T) {
	root := t.TempDir()
	h := host.New(root)
	build := compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}, Links: &linkstest.Netlink{Host: h}, Netns: netnstest.New(config.NetnsShared), DCB: dcbtest.New().Kernel()})
	p := build(h, false, func() {})
	r := reconcile.New(reconcile.Options{Host: h, Early: p.Early, HostParts: p.Host, DeviceParts: p.Device})
	settings := r.Settings()
	if len(settings) == 0 {
		t.Fatal("no settings")
	}
	for _, st := range settings {
		if st.Valid == nil {
			t.Errorf("setting %s has no rule for what found.json holds (Valid)", st.Name)
		}
	}
}

// The table of what changes interrupt traffic: each part's rows name
// settings it keeps and a driver, the table of the running rdmad is every
// part's, and mlx5's PFC row toggles the link while its cable length row
// says it does not (mlx5e_dcbnl_ieee_setpfc).
func TestDisruptionsAreTheirParts(t *testing.T) {
	h := host.New(t.TempDir())
	p := compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}, DCB: dcbtest.New().Kernel()})(h, false, func() {})
	var parts []reconcile.Part
	for _, x := range p.Host {
		parts = append(parts, x)
	}
	for _, x := range p.Device {
		parts = append(parts, x)
	}
	n := 0
	for _, part := range parts {
		d, ok := part.(reconcile.Disruptive)
		if !ok {
			continue
		}
		for _, row := range d.Disruptions() {
			n++
			if row.Driver == "" || row.When == "" || row.Follows == "" || !slices.Contains(part.Settings(), row.Setting) {
				t.Errorf("%T: row %+v: want a driver, words, the kernel code followed and a setting of the part", part, row)
			}
		}
	}
	rec := reconcile.New(reconcile.Options{Host: h, Early: p.Early, HostParts: p.Host, DeviceParts: p.Device})
	if len(rec.Disruptions()) != n || n == 0 {
		t.Errorf("the reconciler's table has %d rows, the parts %d", len(rec.Disruptions()), n)
	}
	pfc := qos.PFC.Setting()
	if d, ok := rec.Disruption(qos.MLX5Driver, pfc, nil, nil); !ok || d.Effect != reconcile.EffectLinkToggle {
		t.Errorf("mlx5 PFC: %+v %v", d, ok)
	}
	if d, ok := rec.Disruption(host.DriverMLX4, pfc, nil, nil); ok {
		t.Errorf("mlx4 PFC interrupts traffic: %+v", d)
	}
	if d, ok := rec.Disruption(qos.MLX5Driver, qos.CableLength.Setting(), nil, nil); ok {
		t.Errorf("mlx5 cable length interrupts traffic: %+v", d)
	}
}

// Every setting a part keeps on a RoCE port has a row in the notification
// table for every driver (how another process's change of it reaches
// rdmad: rdmactl qualify compares an adapter with it), and no row names a
// setting no part keeps or a notice without a name.
func TestEveryRoCESettingHasANotification(t *testing.T) {
	h := host.New(t.TempDir())
	build := compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}, Links: &linkstest.Netlink{Host: h}, Netns: netnstest.New(config.NetnsShared), DCB: dcbtest.New().Kernel()})
	p := build(h, false, func() {})
	r := reconcile.New(reconcile.Options{Host: h, Early: p.Early, HostParts: p.Host, DeviceParts: p.Device})
	table := r.Notifications()
	kept := map[*reconcile.Setting]bool{}
	for _, s := range r.Settings() {
		kept[s] = true
	}
	for _, n := range table {
		if !kept[n.Setting] {
			t.Errorf("a notification row names %v, which no part keeps", n.Setting)
		}
		if strings.HasPrefix(n.Notice.String(), "notice(") || n.Follows == "" {
			t.Errorf("row %s: notice %s, follows %q", n.Setting.Name, n.Notice, n.Follows)
		}
	}
	for _, part := range p.Device {
		_, isQoS := part.(*qos.Part)
		_, isRoCE := part.(*roce.Part)
		if !isQoS && !isRoCE {
			continue // not a RoCE port's (vpi: InfiniBand or Ethernet type)
		}
		for _, s := range part.Settings() {
			if _, ok := reconcile.NotificationOf(table, "any_driver", s); !ok {
				t.Errorf("%s has no notification row for every driver", s.Name)
			}
		}
	}
	if n, ok := reconcile.NotificationOf(table, "mlx5_core", qos.PFC.Setting()); !ok || n.Notice != reconcile.NoticeDCB {
		t.Errorf("PFC on mlx5: %+v", n)
	}
}

// rdmad acts through this machine's kernel only on its own root: under
// any other root (rdmad --root) RDMA netlink, DCB and ethtool are never
// this machine's, and DCB and ethtool are the fixture's own state where
// it carries one.
func TestKernelForActsOnThisMachineOnlyAtItsRoot(t *testing.T) {
	if k := compose.KernelFor(host.New("/")); !reflect.DeepEqual(k, compose.RealKernel()) {
		t.Errorf("at / = %#v, want the real kernel", k)
	}
	root := t.TempDir()
	real := compose.RealKernel()
	k := compose.KernelFor(host.New(root))
	for name, pair := range map[string][2]any{"links": {k.Links, real.Links}, "netns": {k.Netns, real.Netns}, "dcb": {k.DCB, real.DCB}, "ethtool": {k.Ethtool, real.Ethtool}} {
		if reflect.TypeOf(pair[0]) == reflect.TypeOf(pair[1]) {
			t.Errorf("under --root %s: %s is this machine's (%T)", root, name, pair[0])
		}
	}
	if err := k.Links.LinkDel("rxe0"); err == nil || !strings.Contains(err.Error(), "--root") {
		t.Errorf("links under --root: %v, want an error naming --root", err)
	}
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(fixturekernel.File)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, fixturekernel.File), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	k = compose.KernelFor(host.New(root))
	if _, ok := k.DCB.(*fixturekernel.Kernel); !ok {
		t.Errorf("dcb of a fixture with %s: %T, want the fixture's", fixturekernel.File, k.DCB)
	}
	if _, ok := k.Ethtool.(*fixturekernel.Kernel); !ok {
		t.Errorf("ethtool of a fixture with %s: %T, want the fixture's", fixturekernel.File, k.Ethtool)
	}
}
