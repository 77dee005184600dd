package events_test

import (
	"github.com/rdmad/rdmad/daemon/compose"
	"github.com/rdmad/rdmad/daemon/events"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// The services the tests start are built as rdmad builds its own, modprobe
// the test stand-in (package events cannot import compose: compose wires
// its sources).
func init() {
	events.SetServiceParts(compose.Parts(compose.Kernel{Modules: &hosttest.Modprobe{}}))
}
