package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
)

// The bash completion rdmactl ships completes commands, and device names
// from a running rdmad, when bash sources it and presses TAB (the function
// the script registers with complete -F, as bash calls it).
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	const lib = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(lib); err != nil {
		t.Skip("bash-completion not installed (test/install-deps.sh installs it)")
	}
	addr := bustest.Start(t)
	root, denv := livetest.DemoHost(t)
	livetest.Start(t, bins, addr, root, denv)
	script := filepath.Join(hosttest.RepoRoot(), "contrib/completion/rdmactl.bash")
	complete := func(line string) string {
		t.Helper()
		words := strings.Fields(line)
		if strings.HasSuffix(line, " ") {
			words = append(words, "")
		}
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+w+"'")
		}
		prog := "source " + lib + "\nsource " + script + "\n" +
			"COMP_WORDS=(" + strings.Join(quoted, " ") + ")\n" +
			"COMP_CWORD=" + strconv.Itoa(len(words)-1) + "\n" +
			"COMP_LINE='" + line + "'\nCOMP_POINT=${#COMP_LINE}\n" +
			"__start_rdmactl rdmactl\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c", prog)
		cmd.Env = append(os.Environ(), "PATH="+bins.Dir+":"+os.Getenv("PATH"))
		out, err := cmd.Output() // stderr: compopt says it runs outside a real completion
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.Join(strings.Fields(string(out)), " ")
	}
	if got := complete("rdmactl ro"); got != "roce" {
		t.Errorf("rdmactl ro<TAB>: %q", got)
	}
	if got := complete("rdmactl --bus " + addr + " device show "); got != "mlx4_0 mlx5_0 mlx5_1 rxe0" {
		t.Errorf("device show <TAB>: %q", got)
	}
	if got := complete("rdmactl roce set mlx5_0/1 --mode "); got != "v1 v2" {
		t.Errorf("--mode <TAB>: %q", got)
	}
}
