package events

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	"github.com/rdmad/rdmad/daemon/events/eventstest"
	"golang.org/x/sys/unix"
)

var dcbNotification = eventstest.DCBNotification

func TestDCBNotificationBytes(t *testing.T) {
	msg := dcbNotification("ens1f0np0", 20, 7)
	// The framing as iproute2's `ip monitor` (and strace) would read it:
	// 16 bytes of header, 4 of dcbmsg, "ens1f0np0\0" padded to 12 + 4.
	if len(msg) != 16+4+16+(4+(4+136)+4)+8 || binary.LittleEndian.Uint32(msg) != uint32(len(msg)) {
		t.Fatalf("message of %d bytes: % x", len(msg), msg)
	}
	for _, c := range []struct {
		cmd  uint8
		name string
	}{{20, "ens1f0np0"}, {27, "ens1f0np0"}, {20, "eth0"}} {
		got, ok := ParseDCBNotification(dcbNotification(c.name, c.cmd, 1)[16:])
		if !ok || got != c.name {
			t.Errorf("cmd %d: %q %v", c.cmd, got, ok)
		}
	}
	for _, bad := range [][]byte{
		nil, {0, 20, 0},
		dcbNotification("ens1f0np0", 20, 1)[16:18],           // cut in the dcbmsg
		dcbNotification("ens1f0np0", 20, 1)[16:26],           // cut in the name
		dcbNotification("a/b", 20, 1)[16:],                   // not a netdev name
		dcbNotification("averyveryverylongname", 20, 1)[16:], // longer than IFNAMSIZ
	} {
		if got, ok := ParseDCBNotification(bad); ok {
			t.Errorf("% x read as %q", bad, got)
		}
	}
}

func FuzzParseDCBNotification(f *testing.F) {
	f.Add(dcbNotification("ens1f0np0", 20, 7)[16:])
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, ok := ParseDCBNotification(b); ok && (n == "" || len(n) > maxIfnameLen || !validName(n)) {
			t.Fatalf("%q read from % x", n, b)
		}
	})
}

type fakeDCBMonitor struct {
	msgs   chan []byte
	errs   chan error
	closed chan struct{}
	once   sync.Once
}

func (m *fakeDCBMonitor) Receive() ([]string, error) {
	select {
	case b := <-m.msgs:
		return DCBNetdevs(b)
	case err := <-m.errs:
		return nil, err
	case <-m.closed:
		return nil, errors.New("closed")
	}
}

func (m *fakeDCBMonitor) Close() { m.once.Do(func() { close(m.closed) }) }

type recheckRecorder struct {
	mu      sync.Mutex
	netdevs []string
	all     int
	got     chan struct{}
}

func (r *recheckRecorder) RecheckNetdev(n string) {
	r.mu.Lock()
	r.netdevs = append(r.netdevs, n)
	r.mu.Unlock()
	r.got <- struct{}{}
}

func (r *recheckRecorder) RequestAll() {
	r.mu.Lock()
	r.all++
	r.mu.Unlock()
	r.got <- struct{}{}
}

// A DCB notification names the netdev to read again; a notification
// another process sent is dropped; lost ones rescan everything.
func TestDCBSource(t *testing.T) {
	m := &fakeDCBMonitor{msgs: make(chan []byte), errs: make(chan error), closed: make(chan struct{})}
	rec := &recheckRecorder{got: make(chan struct{}, 4)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s := &DCBSource{Open: func() (DCBMonitor, error) { return m, nil }, Req: rec, Retry: func(context.Context) bool { return false }}
	go func() { s.Run(ctx); close(done) }()
	m.msgs <- dcbNotification("ens1f0np0", 20, 3)
	<-rec.got
	m.errs <- &ForeignSenderError{Pid: 4242}
	m.errs <- unix.ENOBUFS
	<-rec.got
	cancel()
	<-done
	if len(rec.netdevs) != 1 || rec.netdevs[0] != "ens1f0np0" || rec.all != 1 {
		t.Errorf("rechecked %v, rescans %d", rec.netdevs, rec.all)
	}
}
