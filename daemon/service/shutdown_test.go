package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/service"
)

// After Shutdown every change is refused before it touches anything.
func TestShutdownRefusesLaterChanges(t *testing.T) {
	e := newEnv(t, "", nil)
	if !e.svc.Shutdown(time.Second) {
		t.Fatal("Shutdown with no change under way did not finish")
	}
	before := e.port(t, "mlx5_0", 1, "default_roce_tos")
	for _, persist := range []bool{false, true} {
		err := e.svc.SetRoCE(context.Background(), service.RoCEChange{Device: "mlx5_0", Port: 1, TOS: 77, Persist: persist})
		if !errors.Is(err, service.ErrStopping) {
			t.Errorf("persist=%v after Shutdown: %v, want ErrStopping", persist, err)
		}
	}
	if got := e.port(t, "mlx5_0", 1, "default_roce_tos"); got != before || e.persisted() != "<none>" {
		t.Errorf("a change after Shutdown touched the host: tos %s, drop-in %s", got, e.persisted())
	}
}
