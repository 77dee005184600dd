package main_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// SIGTERM while many persisted calls run: rdmad stops taking calls, lets
// the one in progress finish and exits 0, leaving no temporary file of its
// drop-in behind (before: 12 of 25 stops left .zz-rdmad-persist.toml.tmp-*).
func TestSIGTERMDuringPersistedCallsLeavesNoTempFile(t *testing.T) {
	t.Parallel() // a bus and a host of its own; the test mostly waits
	addr := privateBus(t)
	root, env, _ := demoHost(t)
	dropins := filepath.Join(root, "etc/rdma/rdmad.d")
	for run := 0; run < 15; run++ {
		p := startRdmad(t, env, "--root", root, "--bus", addr)
		var conn *dbus.Conn
		eventually(t, "rdmad answers on the bus", func() bool {
			c, err := dbusapi.Dial(addr)
			if err != nil {
				return false
			}
			if err := c.Object(dbusapi.BusName, dbusapi.RootPath).Call("org.freedesktop.DBus.Peer.Ping", 0).Err; err != nil {
				c.Close()
				return false
			}
			conn = c
			return true
		})
		var wg sync.WaitGroup
		var calls sync.Map
		stop := make(chan struct{})
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					call := conn.Object(dbusapi.BusName, dbusapi.RootPath).Call(dbusapi.ManagerIface+".SetRoCE", 0,
						"mlx5_0", uint32(1), "", int32((w*7+i)%256), true)
					if call.Err == nil {
						calls.Store(w, i)
					} else if _, ok := call.Err.(dbus.Error); !ok {
						return // the connection went with rdmad
					}
				}
			}()
		}
		// SIGTERM once a persisted call has gone through (how long the
		// first takes depends on the machine's load; without one the run
		// would prove nothing), then a little later each run, so the
		// signal falls at different points of the calls under way.
		eventually(t, fmt.Sprintf("run %d: a persisted call succeeds", run), func() bool {
			some := false
			calls.Range(func(_, _ any) bool { some = true; return false })
			return some
		})
		time.Sleep(time.Duration(run*15) * time.Millisecond)
		p.signal(t, syscall.SIGTERM)
		if got := p.exit(t, 15*time.Second); got != "exit 0" {
			t.Errorf("run %d: rdmad ended with %s", run, got)
		}
		close(stop)
		conn.Close()
		wg.Wait()
		ents, err := os.ReadDir(dropins)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if strings.Contains(e.Name(), ".tmp-") {
				t.Errorf("run %d: %s left in rdmad.d after SIGTERM", run, e.Name())
				os.Remove(filepath.Join(dropins, e.Name()))
			}
		}
	}
}

// notifications records what rdmad sends on NOTIFY_SOCKET, with the time
// each datagram came.
type notification struct {
	at   time.Time
	text string
}

func notifySocket(t *testing.T) (path string, got func() []notification) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var mu sync.Mutex
	var all []notification
	go func() {
		buf := make([]byte, 8192)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			mu.Lock()
			all = append(all, notification{time.Now(), string(buf[:n])})
			mu.Unlock()
		}
	}()
	return path, func() []notification {
		mu.Lock()
		defer mu.Unlock()
		return append([]notification(nil), all...)
	}
}

func watchdogPings(ns []notification, after time.Time) int {
	n := 0
	for _, x := range ns {
		if x.at.After(after) && strings.Contains(x.text, "WATCHDOG=1") {
			n++
		}
	}
	return n
}

// Under WatchdogSec= (WATCHDOG_USEC) rdmad pings while it works, stops
// pinging while a pass is stuck (here the first pass waits in a modprobe of
// rdma_cm) for more than half the interval, so systemd would restart it,
// and pings again once the pass ends.
func TestWatchdogPingsStopWhileAPassIsStuck(t *testing.T) {
	root, env, calls, release := blockingHost(t)
	addr := privateBus(t)
	sock, got := notifySocket(t)
	env = append(env, "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=800000") // 0.8 s: pings every 0.2 s
	p := startRdmad(t, env, "--root", root, "--bus", addr)
	waitFor(t, p, "the first pass waits in modprobe rdma_cm", fileContains(calls, "rdma_cm"))
	stuck := time.Now()
	time.Sleep(2 * time.Second)
	if n := watchdogPings(got(), stuck.Add(600*time.Millisecond)); n != 0 {
		t.Errorf("%d watchdog pings while the pass was stuck for 2 s (watchdog 0.8 s)", n)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	eventually(t, "watchdog pings after the pass ended", func() bool { return watchdogPings(got(), released) >= 2 })
	p.signal(t, syscall.SIGTERM)
	p.exit(t, 10*time.Second)
}
