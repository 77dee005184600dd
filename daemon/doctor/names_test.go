package doctor

import (
	"testing"

	"github.com/rdmad/rdmad/daemon/memlock"
	"github.com/rdmad/rdmad/daemon/netns"
)

// Doctor may not import the parts that write these files (it depends on
// host and config only), so it names them itself; this keeps the names
// the same.
func TestNamesOfRdmadFilesMatchTheirWriters(t *testing.T) {
	if rdmadNetnsFile != netns.ModprobeFile {
		t.Errorf("rdmadNetnsFile %q, netns writes %q", rdmadNetnsFile, netns.ModprobeFile)
	}
	if rdmadLimitsFile != "/"+memlock.LimitsFile || rdmadSystemdDropIn != "/"+memlock.SystemdFile {
		t.Errorf("memlock files %q %q, memlock writes %q %q", rdmadLimitsFile, rdmadSystemdDropIn, memlock.LimitsFile, memlock.SystemdFile)
	}
}
