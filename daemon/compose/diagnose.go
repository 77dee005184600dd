package compose

import (
	"context"

	"github.com/rdmad/rdmad/daemon/doctor"
	"github.com/rdmad/rdmad/daemon/service"
	"github.com/rdmad/rdmad/dbusapi"
)

// DiagnoseInput is what doctor gets from the daemon for the metrics
// textfile: the same input as the bus's Diagnose.
func DiagnoseInput(s *service.Service) doctor.Input {
	return doctor.RunningInput(s, s.Reconciler().Snapshot, s.NetnsKernel())
}

// Diagnose runs doctor on the daemon's view of the host: the findings of
// the metrics textfile (service.Options.Findings).
func Diagnose(s *service.Service) []dbusapi.Finding {
	return doctor.Diagnose(context.Background(), DiagnoseInput(s))
}
