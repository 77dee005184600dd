package bus

import (
	"errors"
	"strings"
	"testing"
)

// The default bound: 2 outstanding checks a user, 32 in all, each freed
// when its check ends.
func TestPolkitBoundDefaults(t *testing.T) {
	a := &PolkitAuthorizer{}
	var release []func()
	take := func(uid uint32) error {
		r, err := a.take(uid)
		if err == nil {
			release = append(release, r)
		}
		return err
	}
	for i := range DefaultChecksPerUser {
		if err := take(1000); err != nil {
			t.Fatalf("check %d of uid 1000: %v", i+1, err)
		}
	}
	if err := take(1000); !errors.Is(err, ErrBusy) {
		t.Fatalf("check %d of uid 1000: %v, want busy", DefaultChecksPerUser+1, err)
	}
	for uid := uint32(2000); len(release) < DefaultChecks; uid++ {
		if err := take(uid); err != nil {
			t.Fatalf("check %d in all (uid %d): %v", len(release)+1, uid, err)
		}
	}
	if err := take(9999); !errors.Is(err, ErrBusy) {
		t.Fatalf("check %d in all: %v, want busy", DefaultChecks+1, err)
	}
	release[0]()
	if err := take(9999); err != nil {
		t.Fatalf("a check after one ended: %v", err)
	}
	if err := take(1000); !errors.Is(err, ErrBusy) {
		t.Errorf("uid 1000's checks were freed by another's: %v", err)
	}
	// Room in all: uid 1000, with one check left outstanding, takes one
	// more and no other.
	release[len(release)-1]()
	release[len(release)-2]()
	release = release[:len(release)-2]
	if err := take(1000); err != nil {
		t.Fatalf("uid 1000's second check: %v", err)
	}
	if err := take(1000); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "uid 1000 already has 2") {
		t.Errorf("uid 1000's third check: %v, want busy for uid 1000", err)
	}
	// All ended: nothing counted is left.
	for _, r := range release[1:] {
		r()
	}
	if len(a.perUser) != 0 || a.total != 0 {
		t.Errorf("after every check ended: %d users counted, %d checks", len(a.perUser), a.total)
	}
}

// A call without a sender (a peer-to-peer connection has none) is refused
// before the bus or polkit is asked anything: there is no caller to ask
// about.
func TestCallWithoutSenderIsRefusedUnasked(t *testing.T) {
	a := &PolkitAuthorizer{} // no connection: asking it would panic
	err := a.Authorize(t.Context(), "", []string{ActionSetRoCE}, false)
	if !errors.Is(err, ErrNotAuthorized) || err.Error() != "[org.rdmad1.set-roce]: a call without a sender" {
		t.Errorf("a call without a sender: %v, want it refused as such", err)
	}
}
