package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
	"github.com/rdmad/rdmad/test/testdeps"
)

// The bash completion rdmactl ships completes commands, and device names
// from a running rdmad, when bash sources it and presses TAB (the function
// the script registers with complete -F, as bash calls it).
func TestBashCompletion(t *testing.T) {
	bash := requireShell(t, "bash")
	const lib = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(lib); err != nil {
		testdeps.Missing(t, "bash-completion's "+lib, "bash-completion", nil)
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

// The zsh and fish completions rdmactl ships complete commands, flag values
// and device names from a running rdmad in the real shells: zsh types the
// line and TAB into an interactive shell on a pseudo-terminal
// (testdata/complete.zsh: compinit, the completion widget, the _rdmactl
// function from contrib/completion on fpath); fish answers complete -C
// after sourcing rdmactl.fish. Both call the rdmactl built for the test,
// first in PATH, for its hidden __complete command.
func TestZshAndFishCompletion(t *testing.T) {
	addr := bustest.Start(t)
	root, denv := livetest.DemoHost(t)
	livetest.Start(t, bins, addr, root, denv)
	dir := filepath.Join(hosttest.RepoRoot(), "contrib/completion")
	harness := filepath.Join(hosttest.RepoRoot(), "cmd/rdmactl/testdata/complete.zsh")
	args := map[string]func(line string) []string{
		"zsh": func(line string) []string { return []string{"-f", harness, dir, line} },
		"fish": func(line string) []string {
			return []string{"--no-config", "-c", "source " + fishQuote(filepath.Join(dir, "rdmactl.fish")) + "; complete -C " + fishQuote(line)}
		},
	}
	for _, name := range []string{"zsh", "fish"} {
		t.Run(name, func(t *testing.T) {
			shell := requireShell(t, name)
			complete := func(line string) string {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, shell, args[name](line)...)
				cmd.Env = append(os.Environ(), "PATH="+bins.Dir+":"+os.Getenv("PATH"), "HOME="+t.TempDir(), "TERM=dumb")
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("%s completing %q: %v\n%s", name, line, err, out)
				}
				var words []string
				for _, l := range strings.Split(string(out), "\n") {
					if w, _, _ := strings.Cut(l, "\t"); strings.TrimSpace(w) != "" { // fish: word TAB description
						words = append(words, strings.TrimSpace(w))
					}
				}
				return strings.Join(words, " ")
			}
			for _, tc := range []struct{ line, want string }{
				{"rdmactl ro", "roce"},
				{"rdmactl roce s", "set show"},
				{"rdmactl roce set mlx5_0/1 --mode ", "v1 v2"},
				{"rdmactl --bus " + addr + " device show ", "mlx4_0 mlx5_0 mlx5_1 rxe0"},
			} {
				if got := complete(tc.line); got != tc.want {
					t.Errorf("%s: %s<TAB> offers %q, want %q", name, tc.line, got, tc.want)
				}
			}
		})
	}
}

// fishQuote quotes s as one fish word.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// requireShell finds a program a completion test runs (testdeps: a
// missing one skips, or fails where test/install-deps.sh ran).
func requireShell(t *testing.T, name string) string {
	t.Helper()
	return testdeps.Tool(t, name, name) // bash, zsh and fish are their packages
}
