package events

import "github.com/rdmad/rdmad/daemon/service"

// serviceParts builds the parts behind the service the tests that run one
// start (startLive, startWatcher): compose.Parts, as rdmad builds them.
// compose wires this package's sources into rdmad, so the package's own
// tests cannot import it; parts_test.go (package events_test) hands it in
// before any test runs.
var serviceParts service.PartsFunc

// SetServiceParts sets the parts the tests' services are built with.
func SetServiceParts(p service.PartsFunc) { serviceParts = p }
