package cli

import (
	"bytes"
	"os"
	"path/filepath"
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
