package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// checkConfigFiles is rdmad --check-config: load the configuration as the
// daemon would and say whether it loads, every error with file and line.
// It reads only: no lock, no bus, no state directory, no host change. With
// a file (--with), the set is checked as if that file were in rdmad.d/
// under the name as (Ansible's validate hands over a temporary file).
func checkConfigFiles(stdout, stderr io.Writer, root, mainFile, with, as string) int {
	if as != "" && with == "" {
		fmt.Fprintln(stderr, "rdmad: --as needs --with FILE")
		return 2
	}
	if mainFile == "" {
		mainFile = host.New(root).Path(config.MainFile)
	}
	dropInDir := config.DropInDirFor(mainFile)
	var r config.Reader = host.Files{Trust: host.TrustFor(root)}
	if with != "" {
		if as == "" {
			as = filepath.Base(with)
		}
		if as != filepath.Base(as) || strings.HasPrefix(as, ".") || !strings.HasSuffix(as, ".toml") {
			fmt.Fprintf(stderr, "rdmad: --as %q: rdmad reads only drop-ins named NAME.toml (no directory, not hidden)\n", as)
			return 2
		}
		r = config.WithFile(r, dropInDir, with, as)
	}
	pol, err := config.Load(r, mainFile)
	if err != nil {
		fmt.Fprintf(stderr, "rdmad: the configuration does not load:\n")
		for _, e := range config.Problems(err) {
			fmt.Fprintf(stderr, "  %s\n", strings.ReplaceAll(e.Error(), "\n", "\n  "))
		}
		return 1
	}
	files := "no file (defaults)"
	if len(pol.Files) > 0 {
		files = strings.Join(pol.Files, ", ")
	}
	fmt.Fprintf(stdout, "configuration loads: %s\n", files)
	return 0
}
