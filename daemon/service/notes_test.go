package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/audit"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/service"
)

// A change made over D-Bus carries who made it and when: the entry of
// rdmad's drop-in gets a comment line naming the caller, a runtime one
// its note in the overlay, both in the policy in force; an entry another
// call does not change keeps its note.
func TestCallsNoteWhoAndWhen(t *testing.T) {
	e := newEnv(t, "", nil)
	root := audit.Caller{Name: ":1.7", UID: 0, HasUID: true, User: "root", PID: 4242, Comm: "busctl", Unit: "session-3.scope"}
	alice := audit.Caller{Name: ":1.9", UID: 1000, HasUID: true, User: "alice", PID: 77, Comm: "rdmactl"}
	if err := e.svc.SetRoCE(audit.With(context.Background(), root), service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 96, Persist: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.SetRoCE(audit.With(context.Background(), alice), service.RoCEChange{Device: "mlx5_1", Port: 1, TOS: 40, Persist: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.SetRoCE(audit.With(context.Background(), alice), service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 32}); err != nil {
		t.Fatal(err)
	}
	// A call that names no caller (an internal one) notes nothing.
	if err := e.svc.SetNetnsMode(context.Background(), config.NetnsShared, false); err != nil {
		t.Fatal(err)
	}
	dropIn := e.persisted()
	for _, want := range []string{
		"\n# set by root (uid 0), pid 4242 busctl, session-3.scope, at ",
		"\n# set by alice (uid 1000), pid 77 rdmactl, at ",
	} {
		if !strings.Contains(dropIn, want) {
			t.Errorf("rdmad's drop-in lacks %q:\n%s", want, dropIn)
		}
	}
	if i, j := strings.Index(dropIn, "root (uid 0)"), strings.Index(dropIn, `device = "mlx5_0"`); i < 0 || j < i {
		t.Errorf("root's note is not above mlx5_0's entry:\n%s", dropIn)
	}
	pol := e.svc.PolicyInForce()
	var persisted, runtime []string
	for _, r := range pol.RoCE {
		switch {
		case r.Source.IsRuntime():
			runtime = append(runtime, r.Device.Name+" "+r.Note.By)
		case config.IsPersistedFile(r.Source):
			persisted = append(persisted, r.Device.Name+" "+r.Note.By)
		}
		if config.FromDBus(r.Source) && r.Note.At.IsZero() {
			t.Errorf("%s: no time in its note", r.Device.Name)
		}
	}
	if strings.Join(persisted, "; ") != "mlx5_0 root (uid 0), pid 4242 busctl, session-3.scope; mlx5_1 alice (uid 1000), pid 77 rdmactl" ||
		strings.Join(runtime, "; ") != "mlx5_0 alice (uid 1000), pid 77 rdmactl" {
		t.Errorf("notes in force: persisted %q runtime %q", persisted, runtime)
	}
	if pol.Netns.Runtime != config.NetnsShared || !pol.Netns.RuntimeNote.Empty() {
		t.Errorf("runtime netns %q note %+v", pol.Netns.Runtime, pol.Netns.RuntimeNote)
	}
}
