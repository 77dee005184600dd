package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// The shell completions in contrib/completion are what `rdmactl completion
// SHELL` prints (make completions writes them).
func TestCompletionFilesAreCurrent(t *testing.T) {
	for shell, file := range map[string]string{"bash": "rdmactl.bash", "zsh": "_rdmactl", "fish": "rdmactl.fish"} {
		var out, errb bytes.Buffer
		if code := Main([]string{"completion", shell}, &out, &errb); code != ExitOK {
			t.Fatalf("completion %s: exit %d: %s", shell, code, errb.String())
		}
		path := filepath.Join(hosttest.RepoRoot(), "contrib/completion", file)
		committed, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(committed, out.Bytes()) {
			t.Errorf("%s is not what rdmactl completion %s prints: run make completions", path, shell)
		}
	}
}

// The shells' scripts ask rdmactl __complete for the words: device names
// and links from rdmad, fixed values of flags, iproute2's keywords.
func TestCompletionWords(t *testing.T) {
	addr := serveFake(t, fixture())
	for _, c := range []struct{ args, want string }{
		{"device show ''", "mlx4_0 mlx5_0 rxe0"},
		{"roce set ''", "mlx4_0 mlx4_0/1 mlx5_0 mlx5_0/1 rxe0 rxe0/1"},
		{"roce set mlx5_0/1 --mode ''", "v1 v2"},
		{"link del ''", "rxe0 rxe1"},
		{"link add rxe2 ''", "type netdev"},
		{"link add rxe2 type ''", "rxe siw"},
		{"netns set ''", "shared exclusive"},
		{"-o ''", "text json"},
		{"--bus ''", "system session"},
	} {
		args := strings.Fields(strings.ReplaceAll(c.args, "''", "\x00"))
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "\x00", "")
		}
		code, out, errs := runCLI(addr, append([]string{"__complete"}, args...)...)
		var words []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(l, ":") {
				words = append(words, strings.SplitN(l, "\t", 2)[0])
			}
		}
		if code != 0 || strings.Join(words, " ") != c.want {
			t.Errorf("__complete %s: exit %d, %q, want %q (%s)", c.args, code, words, c.want, errs)
		}
	}
}
