package events

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/ethtool"
)

// fakeMonitor hands out scripted receives, then blocks until closed.
type fakeMonitor struct {
	script chan fakeReceive
	closed chan struct{}
	once   sync.Once
}

type fakeReceive struct {
	notes []ethtool.Notification
	err   error
}

func newFakeMonitor(rs ...fakeReceive) *fakeMonitor {
	m := &fakeMonitor{script: make(chan fakeReceive, len(rs)), closed: make(chan struct{})}
	for _, r := range rs {
		m.script <- r
	}
	return m
}

func (m *fakeMonitor) Receive() ([]ethtool.Notification, error) {
	select {
	case r := <-m.script:
		return r.notes, r.err
	case <-m.closed:
		return nil, errors.New("use of closed socket")
	}
}

func (m *fakeMonitor) Close() { m.once.Do(func() { close(m.closed) }) }

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPauseSourcePokesOnlyPauseChanges(t *testing.T) {
	m := newFakeMonitor(
		fakeReceive{notes: []ethtool.Notification{{Cmd: 13, Ifname: "ens1f0np0"}}}, // features: not pause
		fakeReceive{notes: []ethtool.Notification{{Cmd: ethtool.CmdPauseNtf, Ifindex: 4, Ifname: "ens1f0np0"}}},
		fakeReceive{err: &ethtool.ForeignSenderError{Pid: 4242}},
		fakeReceive{err: fmt.Errorf("ethtool monitor: %w", unix.ENOBUFS)},
		fakeReceive{notes: []ethtool.Notification{{Cmd: ethtool.CmdPauseNtf, Ifname: "ens1f1np1"}}},
	)
	req := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	src := &PauseSource{Open: func() (PauseMonitor, error) { return m, nil }, Req: req}
	go func() { done <- src.Run(ctx) }()
	want := "recheck:ens1f0np0 * recheck:ens1f1np1"
	waitFor(t, func() bool { return req.got() == want })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := req.got(); got != want {
		t.Errorf("requests %q, want %q (a features change and a foreign sender ask for nothing)", got, want)
	}
}

func TestPauseSourceReopensAndRescans(t *testing.T) {
	first := newFakeMonitor(fakeReceive{err: errors.New("socket gone")})
	second := newFakeMonitor(fakeReceive{notes: []ethtool.Notification{{Cmd: ethtool.CmdPauseNtf, Ifname: "eth1"}}})
	opens := 0
	req := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &PauseSource{
		Open: func() (PauseMonitor, error) {
			opens++
			switch opens {
			case 1:
				return nil, errors.New("no socket yet")
			case 2:
				return first, nil
			}
			return second, nil
		},
		Req:   req,
		Retry: func(context.Context) bool { return true },
	}
	go func() { _ = src.Run(ctx) }()
	waitFor(t, func() bool { return req.got() == "* recheck:eth1" })
}

func TestPauseSourceWithoutEthtoolNetlinkWaits(t *testing.T) {
	req := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	opens := 0
	src := &PauseSource{Open: func() (PauseMonitor, error) { opens++; return nil, ethtool.ErrNoFamily }, Req: req}
	go func() { done <- src.Run(ctx) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-done; err != nil || opens != 1 || req.got() != "" {
		t.Errorf("err %v, %d opens, requests %q: want one try and a quiet wait", err, opens, req.got())
	}
}
