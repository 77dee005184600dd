package bus_test

import (
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/daemon/links/linkstest"
	"github.com/rdmad/rdmad/daemon/netns/netnstest"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
	"github.com/rdmad/rdmad/test/bustest"
)

// callEndWatch is the service as the bus sees it, noting every read of the
// declarations the bus makes while its AfterEachCall listener runs: the
// service publishes what holds there, and the bus must not call back into
// it from inside the call's end. The bus reads the declarations elsewhere
// only inside BetweenCalls, which cannot run while a call's end does, so
// a read noted here is the listener's.
type callEndWatch struct {
	*service.Service
	inEnd atomic.Bool
	ends  atomic.Int64
	mu    sync.Mutex
	reads []string
}

func (w *callEndWatch) AfterEachCall(fn func(service.PolicyStatus)) {
	w.Service.AfterEachCall(func(st service.PolicyStatus) {
		w.inEnd.Store(true)
		defer w.inEnd.Store(false)
		w.ends.Add(1)
		fn(st)
	})
}

func (w *callEndWatch) read(what string) {
	if w.inEnd.Load() {
		w.mu.Lock()
		w.reads = append(w.reads, what)
		w.mu.Unlock()
	}
}

func (w *callEndWatch) PolicyInForce() *config.Policy {
	w.read("PolicyInForce")
	return w.Service.PolicyInForce()
}

func (w *callEndWatch) ConfigError() error {
	w.read("ConfigError")
	return w.Service.ConfigError()
}

func (w *callEndWatch) InForce() config.InForce {
	w.read("InForce")
	return w.Service.InForce()
}

func (w *callEndWatch) PolicyStatus() service.PolicyStatus {
	w.read("PolicyStatus")
	return w.Service.PolicyStatus()
}

func (w *callEndWatch) Declared() (*config.Policy, service.Overlay) {
	w.read("Declared")
	return w.Service.Declared()
}

// The bus serves a call's outcome at the call's end from what the service
// publishes there, reading nothing of the service: an accepted call is
// read back by its client after the reply, a refused one leaves the
// Manager as it was, and no declaration was read inside a call's end.
func TestCallEndPublishesWithoutCallingTheService(t *testing.T) {
	dir := bustest.PublicDir(t)
	addr := privateBus(t, dir)
	root := fixture(t, dir, "mlx5", mlx5Config)
	h := host.New(root)
	conn, err := dbusapi.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	var w *callEndWatch
	startDaemonAs(t, conn, h, compose.Kernel{Modules: &hosttest.Modprobe{Root: root}, Netns: netnstest.New(config.NetnsShared),
		Links: &linkstest.Netlink{Host: h, AddErr: syscall.EOPNOTSUPP}}, &bus.PolkitAuthorizer{Conn: conn, PolkitTimeout: 10 * time.Second},
		func(svc *service.Service) bus.Daemon { w = &callEndWatch{Service: svc}; return w })

	c, err := client.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	port := c.Conn().Object(dbusapi.BusName, dbusapi.PortPath("mlx5_0", 1))
	for _, tos := range []int32{77, 78} {
		if err := c.SetRoCE(t.Context(), "mlx5_0", 1, "", tos, false); err != nil {
			t.Fatal(err)
		}
		v, err := port.GetProperty(dbusapi.PortIface + ".RoCETOS")
		if err != nil || v.Value() != tos {
			t.Errorf("RoCETOS after the reply to SetRoCE %d: %v, %v", tos, v, err)
		}
	}
	if err := c.AddLink(t.Context(), "rxe9", "rxe", "ens1f0np0", false); client.ErrorName(err) != dbusapi.ErrFailed {
		t.Fatalf("AddLink with a kernel that refuses links: %v, want Failed", err)
	}
	if got := managerProp(t, c.Conn(), "Links").([][]any); len(got) != 0 {
		t.Errorf("Links = %v after the refused AddLink", got)
	}
	if n := w.ends.Load(); n < 3 {
		t.Errorf("the bus heard %d call ends, want one per call (3)", n)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.reads) > 0 {
		t.Errorf("the bus called the service inside a call's end: %v", w.reads)
	}
}

var _ bus.Daemon = (*callEndWatch)(nil)
