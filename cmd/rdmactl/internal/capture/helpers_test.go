package capture

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// The rdmad and rdmactl binaries the round trips run, built once.
var rdmadBin, rdmactlBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rdmad-capture-bin-")
	if err != nil {
		panic(err)
	}
	rdmadBin, rdmactlBin = filepath.Join(dir, "rdmad"), filepath.Join(dir, "rdmactl")
	repo := hosttest.RepoRoot()
	for bin, pkg := range map[string]string{rdmadBin: "./cmd/rdmad", rdmactlBin: "./cmd/rdmactl"} {
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			os.Stderr.Write(out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// capture captures root (anonymised unless raw) and returns the tarball.
func capture(t testing.TB, o Options) ([]byte, *Result) {
	t.Helper()
	var buf bytes.Buffer
	if o.Now.IsZero() {
		o.Now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	}
	res, err := Write(&buf, o)
	if err != nil {
		t.Fatalf("capture %s: %v", o.Root, err)
	}
	return buf.Bytes(), res
}

// unpack writes the tarball under dst as tar -x does, refusing an entry
// that would land outside dst, and returns the directory the capture is
// in (dst/Dir).
func unpack(t testing.TB, tarball []byte, dst string) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tarball))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	type stamp struct {
		path string
		t    time.Time
	}
	var times []stamp
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Clean(hdr.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			t.Fatalf("entry %q leaves the tree", hdr.Name)
		}
		p := filepath.Join(dst, name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, os.FileMode(hdr.Mode)&0o777); err != nil {
				t.Fatal(err)
			}
			times = append(times, stamp{p, hdr.ModTime})
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, os.FileMode(hdr.Mode)&0o777); err != nil {
				t.Fatal(err)
			}
			times = append(times, stamp{p, hdr.ModTime})
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(hdr.Linkname, p); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("entry %q: type %q, not a file, directory or symlink", hdr.Name, hdr.Typeflag)
		}
	}
	for i := len(times) - 1; i >= 0; i-- { // children before their directories
		_ = os.Chtimes(times[i].path, times[i].t, times[i].t)
	}
}

// raw is the tarball's entries, names and contents, as one text: what a
// reader of the file sees.
func raw(t testing.TB, tarball []byte) string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tarball))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(hdr.Name + " -> " + hdr.Linkname + "\n")
		data, _ := io.ReadAll(tr)
		b.Write(data)
		b.WriteString("\n")
	}
	return b.String()
}
