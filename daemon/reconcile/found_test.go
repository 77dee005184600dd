package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/reconcile"
	"github.com/rdmad/rdmad/daemon/roce"
)

// foundEnv is a daemon's reconciler with the RoCE part on a copy of the
// mlx5 fixture, recording what it finds in found.json.
type foundEnv struct {
	root string
	k    *hosttest.Kernel
	r    *reconcile.Reconciler
}

const bootA, bootB = "0d7b1c5e-6c1b-4f7e-9a0e-2f1d1d6c3a01", "6a3f0b0e-1e8a-4a39-b7a4-0c6d1a7e9b02"

func newFoundEnv(t *testing.T, root, boot string) *foundEnv {
	t.Helper()
	return newFoundEnvLog(t, root, boot, io.Discard)
}

// newFoundEnvLog is newFoundEnv with its journal written to w.
func newFoundEnvLog(t *testing.T, root, boot string, w io.Writer) *foundEnv {
	t.Helper()
	if root == "" {
		root = hosttest.Copy(t, "mlx5")
	}
	hosttest.Write(t, root, reconcile.BootIDFile, boot+"\n")
	k := hosttest.NewKernel(root)
	h := k.Host()
	log := slog.New(slog.NewTextHandler(w, nil))
	r := reconcile.New(reconcile.Options{Host: h, Log: log, DeviceParts: []reconcile.DevicePart{&roce.Part{Host: h}},
		Detail: host.DetailFull, Found: reconcile.OpenFound(h, log)})
	return &foundEnv{root: root, k: k, r: r}
}

func (e *foundEnv) pass(pol *config.Policy) reconcile.Report {
	return e.r.Pass(context.Background(), pol, reconcile.Scope{Full: true, Forced: true})
}

func (e *foundEnv) tos(t *testing.T, dev string) string {
	return hosttest.Read(t, e.root, host.ConfigfsPortPath(dev, 1, "default_roce_tos"))
}

func tosPolicy(v int) *config.Policy {
	return &config.Policy{Files: []string{"a.toml"},
		RoCE: []config.RoCERule{{Selector: config.Selector{Device: config.Glob("*")}, TOS: tos(v), Source: config.Position{File: "a.toml", Line: 3}}}}
}

var none = &config.Policy{Files: []string{"a.toml"}}

// The first change of a setting on a boot records the kernel's value,
// keyed by the device's node GUID and port, with the boot id; a later
// change keeps the first value. When no rule declares the setting any
// more, the part puts that value back and the entry goes.
func TestRemovedDeclarationPutsBackWhatWasFound(t *testing.T) {
	e := newFoundEnv(t, "", bootA)
	e.pass(tosPolicy(106))
	e.pass(tosPolicy(32))
	if got := e.tos(t, "mlx5_0"); got != "32" {
		t.Fatalf("tos %s", got)
	}
	b, err := os.ReadFile(filepath.Join(e.root, reconcile.FoundFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{reconcile.FoundHeader, `"boot_id": "` + bootA, `"device": "guid b859:9f03:00d4:2e7a"`, `"setting": "roce_tos"`, `"text": "0"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("found.json lacks %q:\n%s", want, b)
		}
	}
	entries := len(reconcile.OpenFound(host.New(e.root), slog.New(slog.DiscardHandler)).Entries())
	rep := e.pass(none)
	if got := e.tos(t, "mlx5_0"); got != "0" {
		t.Errorf("tos after the rule went: %s, want 0 (found)", got)
	}
	if a, ok := rep.Find(reconcile.PortSubject("mlx5_0", 1), roce.TOS.Kind()); !ok || a.Status != reconcile.Changed || a.From != "32" || a.To != "0" {
		t.Errorf("restore action %+v", a)
	}
	// The state the pass stored (what the bus and the metrics publish)
	// holds the value put back, not the one the pass read before it.
	if r := record(e.r.DeviceStates([]string{"mlx5_0"})[0].Ports[0], roce.TOS); r == nil || reconcile.Text(r.Observed) != "0" || r.State != reconcile.Undeclared {
		t.Errorf("TOS record after the restore: %+v", r)
	}
	if n := len(e.r.Snapshot().Unrestored); n != 0 {
		t.Errorf("unrestored %d", n)
	}
	if left := reconcile.OpenFound(host.New(e.root), slog.New(slog.DiscardHandler)).Entries(); len(left) != 0 || entries == 0 {
		t.Errorf("entries before %d, after %v", entries, left)
	}
	// Nothing recorded any more: a value set by hand now stays.
	hosttest.Write(t, e.root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"), "8\n")
	e.pass(none)
	if got := e.tos(t, "mlx5_0"); got != "8" {
		t.Errorf("a value set after the undo was changed: %s", got)
	}
}

// found.json survives a restart of rdmad on the same boot (a new
// reconciler loads it), and follows the device by its GUID when its name
// changes; on another boot its entries are dropped.
func TestFoundSurvivesRestartNotReboot(t *testing.T) {
	e := newFoundEnv(t, "", bootA)
	e.pass(tosPolicy(106))
	// rdmad restarts; meanwhile udev renamed the device (its configfs
	// directory goes with the old name).
	hosttest.RenameDevice(t, e.root, "mlx5_0", "rocep59s0f0")
	e2 := newFoundEnv(t, e.root, bootA)
	e2.pass(none)
	if got := e2.tos(t, "rocep59s0f0"); got != "0" {
		t.Errorf("after a restart and a rename: tos %s, want 0", got)
	}
	// Another boot: what the last one found is not this boot's.
	e3 := newFoundEnv(t, e.root, bootA)
	e3.pass(tosPolicy(106))
	e4 := newFoundEnv(t, e.root, bootB)
	e4.pass(none)
	if got := e4.tos(t, "rocep59s0f0"); got != "106" {
		t.Errorf("an entry of another boot was put back: tos %s", got)
	}
}

// A found.json another user could have written is not trusted: nothing is
// put back from it.
func TestUntrustedFoundIsIgnored(t *testing.T) {
	e := newFoundEnv(t, "", bootA)
	e.pass(tosPolicy(106))
	if err := os.Chmod(filepath.Join(e.root, reconcile.FoundFile), 0o666); err != nil {
		t.Fatal(err)
	}
	e2 := newFoundEnv(t, e.root, bootA)
	if n := len(e2.r.Snapshot().Unrestored) + len(reconcile.OpenFound(host.New(e.root), slog.New(slog.DiscardHandler)).Entries()); n != 0 {
		t.Errorf("an untrusted found.json was read: %d entries", n)
	}
	e2.pass(none)
	if got := e2.tos(t, "mlx5_0"); got != "106" {
		t.Errorf("tos %s put back from an untrusted file", got)
	}
}

// A found.json without rdmad's header is not rdmad's, as the last good
// configuration without it is not: rdmad neither puts back what it holds
// nor writes over it, says so once at error priority (not after every
// pass), and keeps what it finds from then on in memory. With the header
// back (an edit had dropped the line), the next pass takes the file's
// values again, first found first; with the file moved away, the next
// pass writes a new one.
func TestFoundWithoutHeaderIsRefused(t *testing.T) {
	for _, fix := range []string{"header put back", "file removed"} {
		t.Run(fix, func(t *testing.T) {
			e := newFoundEnv(t, "", bootA)
			e.pass(tosPolicy(106))
			name := filepath.Join(e.root, reconcile.FoundFile)
			b, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			bare := []byte(strings.TrimPrefix(string(b), reconcile.FoundHeader))
			if err := os.WriteFile(name, bare, 0o644); err != nil {
				t.Fatal(err)
			}
			log := &syncBuffer{}
			e2 := newFoundEnvLog(t, e.root, bootA, log)
			// Passes that find something to record and to put back: each
			// would save found.json.
			hosttest.Write(t, e.root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"), "8\n")
			e2.pass(tosPolicy(106))
			e2.pass(none)
			e2.pass(none)
			if got := e2.tos(t, "mlx5_0"); got != "8" {
				t.Errorf("tos %s: put back from a found.json without rdmad's header (want 8, the value this rdmad found)", got)
			}
			if got, _ := os.ReadFile(name); string(got) != string(bare) {
				t.Errorf("found.json without the header was written over:\n%s", got)
			}
			if n := strings.Count(log.String(), "level=ERROR"); n != 1 || !strings.Contains(log.String(), name) {
				t.Errorf("%d error lines, want 1 naming %s:\n%s", n, name, log)
			}
			problem := e2.r.Snapshot().FoundError
			if problem == nil || !strings.Contains(problem.Error(), name) || !strings.Contains(problem.Error(), "header") {
				t.Errorf("State.FoundError %v", problem)
			}
			switch fix {
			case "header put back":
				if err := os.WriteFile(name, append([]byte(reconcile.FoundHeader), bare...), 0o644); err != nil {
					t.Fatal(err)
				}
				e2.pass(tosPolicy(106))
				e2.pass(none)
				if got := e2.tos(t, "mlx5_0"); got != "0" {
					t.Errorf("tos %s, want 0: the value the file recorded, first found", got)
				}
			case "file removed":
				if err := os.Remove(name); err != nil {
					t.Fatal(err)
				}
				e2.pass(tosPolicy(106))
				if b, err := os.ReadFile(name); err != nil || !strings.HasPrefix(string(b), reconcile.FoundHeader) || !strings.Contains(string(b), `"text": "8"`) {
					t.Errorf("found.json after the old one went: %v\n%s", err, b)
				}
			}
			if problem := e2.r.Snapshot().FoundError; problem != nil {
				t.Errorf("still refused: %v", problem)
			}
			if !strings.Contains(log.String(), "level=INFO") {
				t.Errorf("the end of the refusal is not logged:\n%s", log)
			}
		})
	}
}

// A value the part cannot put back is reported (State.Unrestored), once,
// and not tried again; declared again, the report goes.
func TestUnrestoredIsReportedNotRetried(t *testing.T) {
	e := newFoundEnv(t, "", bootA)
	e.pass(tosPolicy(106))
	e.k.Refuse("mlx5_0/ports/1/default_roce_tos", "0", syscall.EBUSY)
	writes := e.k.WriteCount()
	rep := e.pass(none)
	a, ok := rep.Find(reconcile.PortSubject("mlx5_0", 1), roce.TOS.Kind())
	if !ok || a.Status != reconcile.Failed || !errors.Is(a.Err, syscall.EBUSY) {
		t.Errorf("restore %+v", a)
	}
	un := e.r.Snapshot().Unrestored
	if len(un) != 1 || un[0].Text != "0" || !strings.Contains(un[0].Error, "device or resource busy") {
		t.Fatalf("unrestored %+v", un)
	}
	w := e.k.WriteCount()
	e.pass(none)
	if e.k.WriteCount() != w {
		t.Errorf("retried: %d writes", e.k.WriteCount()-w)
	}
	if w == writes {
		t.Error("nothing was tried")
	}
	e.pass(tosPolicy(106))
	if un := e.r.Snapshot().Unrestored; len(un) != 0 {
		t.Errorf("declared again, still reported: %+v", un)
	}
}

// The files that do not load leave a daemon with nothing declared: it
// changes nothing, and undoes nothing either.
func TestNothingDeclaredUndoesNothing(t *testing.T) {
	e := newFoundEnv(t, "", bootA)
	e.pass(tosPolicy(106))
	e.pass(config.NothingDeclared("/etc/rdma/rdmad.toml"))
	if got := e.tos(t, "mlx5_0"); got != "106" {
		t.Errorf("tos %s", got)
	}
}

type hiddenValue struct{ n int }

func (v hiddenValue) String() string { return fmt.Sprint(v.n) }

type nestedValue struct {
	Netdev string
	Inner  struct{ ok, Fine bool }
}

func (v nestedValue) String() string { return fmt.Sprint(v.Netdev, v.Inner.ok, v.Inner.Fine) }

// A setting whose value would not survive found.json whole (a field
// encoding/json skips would come back as its zero) is refused when it is
// declared, so no part can keep one.
func TestSettingValueMustSurviveFound(t *testing.T) {
	for name, declare := range map[string]func(){
		"unexported field": func() { reconcile.NewSetting[hiddenValue](reconcile.Setting{Name: "h", Kind: "h", Key: "h"}) },
		"nested field":     func() { reconcile.NewSetting[nestedValue](reconcile.Setting{Name: "n", Kind: "n", Key: "n"}) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "found.json") {
					t.Errorf("%s: declared without complaint (%v)", name, r)
				}
			}()
			declare()
		}()
	}
}

// Without a boot id nothing is recorded, so nothing of another boot can
// be put back.
func TestNoBootIDRecordsNothing(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	h := host.New(root)
	log := slog.New(slog.DiscardHandler)
	r := reconcile.New(reconcile.Options{Host: h, Log: log, DeviceParts: []reconcile.DevicePart{&roce.Part{Host: h}},
		Detail: host.DetailFull, Found: reconcile.OpenFound(h, log)})
	r.Pass(context.Background(), tosPolicy(106), reconcile.Scope{Full: true, Forced: true})
	if _, err := os.Stat(filepath.Join(root, reconcile.FoundFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("found.json written without a boot id: %v", err)
	}
}

// found.json of this boot full of the entries of devices that are gone
// (65,536: VFs created and destroyed, or a file written to fill it)
// neither keeps rdmad from recording a present device's value (an entry
// of a gone device makes room), so removing a real rule still puts its
// value back, nor stays that size: once the devices have been gone for
// reconcile.FoundGoneAfter, their entries are dropped.
func TestFoundDropsTheEntriesOfDevicesGone(t *testing.T) {
	root := hosttest.Copy(t, "mlx5")
	var b strings.Builder
	b.WriteString(reconcile.FoundHeader + `{"boot_id": "` + bootA + `", "found": [`)
	for i := range reconcile.MaxFoundEntries {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"subject": {"kind": 2, "device": "vf%d", "port": 1}, "device": "pci 0000:%02x:%02x.%d", "setting": "roce_tos", "value": 5, "text": "5", "found": "2026-11-28T10:00:00Z"}`,
			i, 0x40+i>>11, (i>>3)&0xff, i&7)
	}
	b.WriteString("]}\n")
	hosttest.Write(t, root, reconcile.FoundFile, b.String())
	if err := os.Chmod(filepath.Join(root, reconcile.FoundFile), 0o600); err != nil {
		t.Fatal(err)
	}
	hosttest.Write(t, root, reconcile.BootIDFile, bootA+"\n")
	now := time.Unix(1_800_000_000, 0)
	h := hosttest.NewKernel(root).Host()
	log := slog.New(slog.DiscardHandler)
	r := reconcile.New(reconcile.Options{Host: h, Log: log, DeviceParts: []reconcile.DevicePart{&roce.Part{Host: h}},
		Detail: host.DetailFull, Found: reconcile.OpenFound(h, log), Now: func() time.Time { return now }})
	if n := len(reconcile.OpenFound(h, log).Entries()); n != reconcile.MaxFoundEntries {
		t.Fatalf("%d entries loaded, want %d", n, reconcile.MaxFoundEntries)
	}
	pass := func(pol *config.Policy) { r.Pass(context.Background(), pol, reconcile.Scope{Full: true, Forced: true}) }
	tos := func() string { return hosttest.Read(t, root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos")) }
	pass(tosPolicy(106))
	pass(none)
	if got := tos(); got != "0" {
		t.Errorf("removing the rule left TOS %s, want 0 (found)", got)
	}
	entries := func() int { return len(reconcile.OpenFound(h, log).Entries()) }
	if n := entries(); n < reconcile.MaxFoundEntries-4 {
		t.Errorf("%d entries before the devices were gone %s", n, reconcile.FoundGoneAfter)
	}
	now = now.Add(reconcile.FoundGoneAfter)
	pass(tosPolicy(106))
	if n := entries(); n != 2 {
		t.Errorf("%d entries once the devices were gone %s, want the 2 of mlx5_0 and mlx5_1", n, reconcile.FoundGoneAfter)
	}
	fi, err := os.Stat(filepath.Join(root, reconcile.FoundFile))
	if err != nil || fi.Size() > 4096 {
		t.Errorf("found.json: %v, %d bytes", err, fi.Size())
	}
}
