package compose

import (
	"log/slog"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/daemon/bus"
	"github.com/rdmad/rdmad/daemon/service"
)

// Bus serves the running service svc on conn: the bus reads the
// reconciler's state and follows its passes, listens to the service's
// calls and configuration changes, and serves the Manager's methods
// behind auth. The well-known name is taken by the caller
// (bus.Server.RequestName) once the first pass is served.
func Bus(conn *dbus.Conn, svc *service.Service, auth bus.Authorizer, log *slog.Logger) (*bus.Server, error) {
	return bus.New(conn, svc.Reconciler(), svc, auth, log)
}
