package bus_test

import (
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/bus"
)

// polkitFake is org.freedesktop.PolicyKit1 on a test bus, speaking
// polkit's Authority interface as polkitd does: CheckAuthorization answers
// from a table (or with a challenge), an interactive check can be left
// pending as polkitd leaves it while an agent shows its prompt, and
// CancelCheckAuthorization ends a pending check with
// org.freedesktop.PolicyKit1.Error.Cancelled. It records every check and
// cancellation, and how many checks were pending at once, per uid.
type polkitFake struct {
	conn *dbus.Conn

	mu        sync.Mutex
	allow     map[string]bool
	challenge bool // answer a challenge to what allow does not allow
	hold      bool // leave interactive checks pending until cancelled
	checks    []polkitCheck
	cancels   []string
	pending   map[string]chan struct{} // by cancellation id
	perUID    map[uint32]int
	maxPerUID map[uint32]int
	total     int
	maxTotal  int
	arrived   chan polkitCheck
	stopped   chan struct{}
}

type polkitCheck struct {
	Subject bus.PolkitSubject
	Action  string
	Flags   uint32
	ID      string
	UID     uint32
}

const polkitCancelled = "org.freedesktop.PolicyKit1.Error.Cancelled"

// newPolkitFake exports the fake on a connection of its own to addr; it
// owns polkit's name only once started.
func newPolkitFake(t *testing.T, addr string) *polkitFake {
	t.Helper()
	p := &polkitFake{conn: dialT(t, addr), allow: map[string]bool{}, pending: map[string]chan struct{}{},
		perUID: map[uint32]int{}, maxPerUID: map[uint32]int{}, arrived: make(chan polkitCheck, 4096), stopped: make(chan struct{})}
	if err := p.conn.Export(p, "/org/freedesktop/PolicyKit1/Authority", "org.freedesktop.PolicyKit1.Authority"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		select {
		case <-p.stopped:
		default:
			close(p.stopped)
		}
	})
	return p
}

// start takes polkit's name: from now on rdmad finds polkit on the bus.
func (p *polkitFake) start(t *testing.T) {
	t.Helper()
	if r, err := p.conn.RequestName("org.freedesktop.PolicyKit1", dbus.NameFlagDoNotQueue); err != nil || r != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("take polkit's name: %v %v", r, err)
	}
}

// set changes how the fake answers.
func (p *polkitFake) set(allow []string, challenge, hold bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.allow = map[string]bool{}
	for _, a := range allow {
		p.allow[a] = true
	}
	p.challenge, p.hold = challenge, hold
}

// take returns the checks and cancellations recorded since the last take.
func (p *polkitFake) take() ([]polkitCheck, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, x := p.checks, p.cancels
	p.checks, p.cancels = nil, nil
	return c, x
}

// cancelled waits up to d for the check of id to be cancelled.
func (p *polkitFake) cancelled(id string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		for _, c := range p.cancels {
			if c == id {
				p.mu.Unlock()
				return true
			}
		}
		p.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// pendingNow is how many checks are pending.
func (p *polkitFake) pendingNow() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

func (p *polkitFake) CheckAuthorization(subject bus.PolkitSubject, action string, _ map[string]string, flags uint32, id string) (bus.PolkitResult, *dbus.Error) {
	uid := ^uint32(0)
	if name, ok := subject.Details["name"].Value().(string); ok {
		_ = p.conn.BusObject().Call("org.freedesktop.DBus.GetConnectionUnixUser", 0, name).Store(&uid)
	}
	c := polkitCheck{subject, action, flags, id, uid}
	p.mu.Lock()
	p.checks = append(p.checks, c)
	allowed, challenge, hold := p.allow[action], p.challenge, p.hold
	var cancel chan struct{}
	if hold && flags&1 != 0 {
		cancel = make(chan struct{})
		p.pending[id] = cancel
		p.perUID[uid]++
		p.total++
		p.maxPerUID[uid] = max(p.maxPerUID[uid], p.perUID[uid])
		p.maxTotal = max(p.maxTotal, p.total)
	}
	p.mu.Unlock()
	p.arrived <- c
	if cancel != nil {
		select {
		case <-cancel:
		case <-p.stopped:
		}
		p.mu.Lock()
		delete(p.pending, id)
		p.perUID[uid]--
		p.total--
		p.mu.Unlock()
		return bus.PolkitResult{}, dbus.NewError(polkitCancelled, []any{"the check was cancelled"})
	}
	return bus.PolkitResult{IsAuthorized: allowed, IsChallenge: !allowed && challenge, Details: map[string]string{}}, nil
}

func (p *polkitFake) CancelCheckAuthorization(id string) *dbus.Error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cancels = append(p.cancels, id)
	if c, ok := p.pending[id]; ok {
		close(c)
		delete(p.pending, id)
	}
	return nil
}
