package main_test

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// journald restarting, or a test's pipe going away, closes rdmad's
// stdout/stderr: its next log line must fail quietly, not kill it with
// SIGPIPE (status 141), and it keeps serving.
func TestClosedLogPipeDoesNotStopRdmad(t *testing.T) {
	addr := privateBus(t)
	root, env, _ := demoHost(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(rdmadBin, "--root", root, "--bus", addr)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	ctl := func(args ...string) error {
		return exec.Command(rdmactlBin, append([]string{"--bus", addr}, args...)...).Run()
	}
	eventually(t, "rdmad answers on the bus", func() bool { return ctl("status") == nil })
	r.Close()                                     // the reader goes: every write to the pipe now fails with EPIPE
	for _, tos := range []string{"1", "2", "3"} { // each one logs "applied"
		if err := ctl("roce", "set", "mlx5_0/1", "--tos", tos); err != nil {
			t.Fatalf("roce set after the log pipe closed: %v", err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("rdmad ended when its log pipe closed: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := ctl("status"); err != nil {
		t.Errorf("status after the log pipe closed: %v", err)
	}
}
