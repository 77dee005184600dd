package doctor

import (
	"testing"

	"github.com/rdmad/rdmad/daemon/memlock"
)

// Doctor does not import memlock, which writes these files, so it names
// them itself; this keeps the names the same. (The netns and qos files it
// takes from their parts.)
func TestNamesOfRdmadFilesMatchTheirWriters(t *testing.T) {
	if rdmadLimitsFile != "/"+memlock.LimitsFile || rdmadSystemdDropIn != "/"+memlock.SystemdFile {
		t.Errorf("memlock files %q %q, memlock writes %q %q", rdmadLimitsFile, rdmadSystemdDropIn, memlock.LimitsFile, memlock.SystemdFile)
	}
}
