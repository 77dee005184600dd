package cli_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/cmd/rdmactl/internal/cli"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// tarNames lists a gzip-compressed tarball's entry names.
func tarNames(t *testing.T, r io.Reader) []string {
	t.Helper()
	zr, err := gzip.NewReader(r)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
	}
}

// rdmactl capture as users meet it: the file and its summary, raw or
// anonymised, to standard output, as JSON; never over -H.
func TestCaptureCommand(t *testing.T) {
	root := hosttest.Copy(t, "demo")
	hosttest.Write(t, root, "etc/hostname", "demo-host\n")
	dir := t.TempDir()
	run := func(args ...string) (int, string, string) {
		var out, errb strings.Builder
		code := cli.Main(args, &out, &errb)
		return code, out.String(), errb.String()
	}

	file := filepath.Join(dir, "node7.tar.gz")
	code, out, errs := run("capture", "--root", root, "-o", file)
	if code != cli.ExitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{"wrote " + file + ": ", " files, ", "replaced: 3 MAC addresses, 4 GUIDs, 1 host name (--raw keeps them)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("%s: %v, %v", file, st, err)
	}
	f, _ := os.Open(file)
	names := tarNames(t, f)
	f.Close()
	if len(names) == 0 || names[0] != "node7/" {
		t.Errorf("the entries are not under node7/: %v", names[:min(3, len(names))])
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, ".*")); len(matches) != 0 {
		t.Errorf("temporary files left: %v", matches)
	}

	raw := filepath.Join(dir, "raw.tar.gz")
	code, out, _ = run("capture", "--root", root, "-o", raw, "--raw")
	if st, err := os.Stat(raw); code != cli.ExitOK || err != nil || st.Mode().Perm() != 0o600 || !strings.Contains(out, "raw: ") {
		t.Errorf("--raw: exit %d, %v %v\n%s", code, st, err, out)
	}

	code, out, errs = run("capture", "--root", root, "-o", "-", "-j")
	var rep struct {
		File       string
		Anonymised bool
		Replaced   map[string]int
		Skipped    []struct{ Path, Why string }
	}
	if code != cli.ExitOK || json.Unmarshal([]byte(errs), &rep) != nil || rep.File != "-" || !rep.Anonymised || rep.Replaced["guid"] != 4 || rep.Skipped == nil {
		t.Errorf("-o - -j: exit %d, stderr %s", code, errs)
	}
	if names := tarNames(t, bytes.NewReader([]byte(out))); len(names) == 0 || names[0] != "rdmad-capture/" {
		t.Errorf("-o -: the tarball on standard output has %d entries", len(names))
	}

	if code, _, errs := run("-H", "node1", "capture"); code != cli.ExitUsage || !strings.Contains(errs, "ssh HOST sudo rdmactl capture") {
		t.Errorf("-H: exit %d %q", code, errs)
	}
	if code, _, errs := run("capture", "--root", filepath.Join(dir, "nosuch"), "-o", filepath.Join(dir, "x.tar.gz")); code != cli.ExitFailure || !strings.Contains(errs, "nosuch") {
		t.Errorf("a root that is not there: exit %d %q", code, errs)
	}
	if os.Geteuid() != 0 {
		if code, _, errs := run("capture", "-o", filepath.Join(dir, "me.tar.gz")); code != cli.ExitFailure || !strings.Contains(errs, "needs root") {
			t.Errorf("not root: exit %d %q", code, errs)
		}
	}
}
