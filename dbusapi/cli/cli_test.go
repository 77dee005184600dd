package cli

import (
	"os/exec"
	"strings"
	"testing"
)

func TestHelpOnlyAsCommand(t *testing.T) {
	e := &env{}
	if _, err := e.globals([]string{"help"}); err != errHelp {
		t.Errorf("help as the command: %v", err)
	}
	rest, err := e.globals([]string{"link", "add", "help", "--type", "rxe", "--bus", "session"})
	if err != nil || strings.Join(rest, " ") != "link add help --type rxe" || e.bus != "session" {
		t.Errorf("link named help: rest %q err %v bus %q", rest, err, e.bus)
	}
}

// rdmactl reads the host only through rdmad: neither the CLI nor the
// client imports a daemon package (version, the build stamp, aside).
func TestRdmactlImportsNoDaemonCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}: {{join .Imports \" \"}}",
		"github.com/rdmad/rdmad/dbusapi/cli", "github.com/rdmad/rdmad/dbusapi/client").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v: %s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, ": ")
		for _, imp := range strings.Fields(imports) {
			if strings.HasPrefix(imp, "github.com/rdmad/rdmad/daemon/") && imp != "github.com/rdmad/rdmad/daemon/version" {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
}
