package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

// The unprivileged caller of the authorization tests is this test binary
// run again as another uid: TestMain sees callerEnv and makes the calls it
// describes instead of running tests. The bus then authenticates the
// process as that uid (EXTERNAL), as it would rdmactl or Cockpit's bridge.
const callerEnv = "RDMAD_BUS_TEST_CALLER"

// callerSpec is what a caller process does: count calls of method with
// args, all at once on one connection.
type callerSpec struct {
	Addr        string
	Method      string
	Args        []arg
	Interactive bool
	Count       int // 0: 1
	// LeaveAfter, when set, closes the connection that long after the
	// calls were sent, without waiting for their replies.
	LeaveAfter time.Duration
}

// arg is one D-Bus argument as JSON carries it, with its type.
type arg struct {
	S *string `json:",omitempty"`
	U *uint32 `json:",omitempty"`
	I *int32  `json:",omitempty"`
	B *bool   `json:",omitempty"`
	Y []byte  `json:",omitempty"`
	// Ay marks Y as an array, so an empty one is still sent.
	Ay bool `json:",omitempty"`
	// SV is an a{sv} whose values are byte arrays (SetQoSSettings); an
	// empty one is still sent.
	SV map[string][]byte
	// AS is an array of strings (HoldCorrections); As marks it as one, so
	// an empty one is still sent.
	AS []string `json:",omitempty"`
	As bool     `json:",omitempty"`
}

func argS(s string) arg     { return arg{S: &s} }
func argU(u uint32) arg     { return arg{U: &u} }
func argI(i int32) arg      { return arg{I: &i} }
func argB(b bool) arg       { return arg{B: &b} }
func argY(y []byte) arg     { return arg{Y: y, Ay: true} }
func argsOf(a ...arg) []arg { return a }

func argSV(sv map[string][]byte) arg { return arg{SV: sv} }
func argAS(as ...string) arg         { return arg{AS: as, As: true} }

func (a arg) value() any {
	switch {
	case a.S != nil:
		return *a.S
	case a.U != nil:
		return *a.U
	case a.I != nil:
		return *a.I
	case a.B != nil:
		return *a.B
	case a.As:
		return append([]string{}, a.AS...)
	case a.SV != nil:
		m := map[string]dbus.Variant{}
		for k, v := range a.SV {
			m[k] = dbus.MakeVariant(v)
		}
		return m
	}
	return append([]byte{}, a.Y...)
}

// callResult is one call's outcome as the caller saw it: "" for success.
type callResult struct {
	Name, Message string
}

// runCaller is the caller process's main.
func runCaller(spec string) int {
	var s callerSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	conn, err := dbusapi.Dial(s.Addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var flags dbus.Flags
	if s.Interactive {
		flags |= dbus.FlagAllowInteractiveAuthorization
	}
	args := make([]any, len(s.Args))
	for i, a := range s.Args {
		args[i] = a.value()
	}
	n := max(s.Count, 1)
	calls := make([]*dbus.Call, n)
	for i := range calls {
		calls[i] = client.GoWithFlags(context.Background(), conn, dbusapi.BusName, dbusapi.RootPath, dbusapi.ManagerIface+"."+s.Method, flags, make(chan *dbus.Call, 1), args...)
	}
	if s.LeaveAfter > 0 {
		time.Sleep(s.LeaveAfter)
		conn.Close()
		return 0
	}
	out := make([]callResult, n)
	for i, c := range calls {
		<-c.Done
		if c.Err != nil {
			out[i] = callResult{client.ErrorName(c.Err), client.ErrorMessage(c.Err)}
			if out[i].Name == "" {
				out[i].Name = c.Err.Error()
			}
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return 2
	}
	return 0
}

// callerBin is a copy of this test binary that every uid may run (the
// one go test built sits in a private directory).
var callerBin = struct {
	once sync.Once
	path string
	err  error
}{}

func callerBinary(t *testing.T) string {
	t.Helper()
	callerBin.once.Do(func() {
		self, err := os.Executable()
		if err != nil {
			callerBin.err = err
			return
		}
		data, err := os.ReadFile(self)
		if err != nil {
			callerBin.err = err
			return
		}
		dir, err := os.MkdirTemp("", "rdmad-caller-")
		if err == nil {
			err = os.Chmod(dir, 0o755)
		}
		if err != nil {
			callerBin.err = err
			return
		}
		callerBin.path = filepath.Join(dir, "caller")
		callerBin.err = os.WriteFile(callerBin.path, data, 0o755)
	})
	if callerBin.err != nil {
		t.Fatalf("copy the test binary for the caller: %v", callerBin.err)
	}
	return callerBin.path
}

// startCaller starts a caller process as uid (its gid the same) making
// the calls of s. Its results come from wait.
func startCaller(t *testing.T, uid uint32, s callerSpec) (wait func() []callResult) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to run a caller as another uid")
	}
	spec, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(callerBinary(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), callerEnv+"="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	cmd.Dir = "/"
	var stdout, stderr limitedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return func() []callResult {
		t.Helper()
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) || err != nil {
			t.Fatalf("caller %s as uid %d: %v\n%s", s.Method, uid, err, stderr.String())
		}
		if s.LeaveAfter > 0 {
			return nil
		}
		var out []callResult
		if err := json.Unmarshal([]byte(stdout.String()), &out); err != nil {
			t.Fatalf("caller output %q: %v\n%s", stdout.String(), err, stderr.String())
		}
		return out
	}
}

// callAs makes one call as uid and returns its result.
func callAs(t *testing.T, addr string, uid uint32, interactive bool, method string, args ...arg) callResult {
	t.Helper()
	res := startCaller(t, uid, callerSpec{Addr: addr, Method: method, Args: args, Interactive: interactive})()
	if len(res) != 1 {
		t.Fatalf("%s as uid %d: %d results", method, uid, len(res))
	}
	return res[0]
}

// limitedBuffer keeps the first MiB written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 1<<20 - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
