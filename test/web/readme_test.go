package web

import (
	"bytes"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
)

// readmeShot is the README's picture of the page.
const readmeShot = "docs/cockpit-overview.png"

// TestREADMEScreenshot takes the README's picture of the page the way an
// operator meets it: the demo host (two ConnectX-5 RoCE functions, a
// ConnectX-3 VPI adapter, Soft-RoCE) with the shipped rdmad.toml and the
// example drop-in of docs/examples, every declared setting held. The page
// must show nothing of a test: no path outside the host's own files (the
// fixture root), no error, no drift. The picture goes to the artefacts
// directory, and with RDMAD_UPDATE_README_SCREENSHOT=1 to docs/ as well:
//
//	RDMAD_UPDATE_README_SCREENSHOT=1 go test -run TestREADMEScreenshot ./test/web/
func TestREADMEScreenshot(t *testing.T) {
	exe := need(t)
	if os.Getuid() != 0 {
		t.Skip("needs root: the bridge runs as root for the administrative view")
	}
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	example, err := os.ReadFile(filepath.Join(hosttest.RepoRoot(), "docs/examples/50-roce.toml"))
	if err != nil {
		t.Fatal(err)
	}
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-roce.toml", string(example))
	// The page names rdmad's version: the release's, from VERSION, not the
	// test build's "dev".
	version, err := os.ReadFile(filepath.Join(hosttest.RepoRoot(), "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	released := bins
	released.Rdmad = filepath.Join(t.TempDir(), "rdmad")
	build := exec.Command("go", "build", "-ldflags", "-X github.com/rdmad/rdmad/daemon/version.Version="+strings.TrimSpace(string(version)),
		"-o", released.Rdmad, "./cmd/rdmad")
	build.Dir = hosttest.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	livetest.Start(t, released, addr, root, env)
	url := startWS(t, addr, installPage(t), 0)

	b := newBrowser(t, exe)
	b.run(t, "open "+url, chromedp.Navigate(url))
	b.waitFor(t, "the page to connect", `document.body.dataset.ready === "yes" && document.querySelectorAll("#ports-body tr[data-port]").length > 0`)
	b.waitFor(t, "administrative access", `!document.getElementById("reconcile").disabled`)

	got := rows(t, b)
	if len(got) < 5 {
		t.Fatalf("the overview shows %d ports, want the demo host's five: %v", len(got), got)
	}
	for key, r := range got {
		if r.Drift != "✓ as declared" && r.Drift != "not applicable" {
			t.Errorf("%s: %q; the README's host holds every declared setting", key, r.Drift)
		}
	}
	var text string
	b.eval(t, `document.body.innerText`, &text)
	if !strings.Contains(text, "rdmad "+strings.TrimSpace(string(version))+" ·") {
		t.Errorf("the page does not name rdmad %s:\n%s", strings.TrimSpace(string(version)), text)
	}
	for _, bad := range []string{root, os.TempDir(), "error", "failed", "<img"} {
		if strings.Contains(text, bad) {
			t.Errorf("the page shows %q, which an operator's host would not:\n%s", bad, text)
		}
	}

	var shot []byte
	b.run(t, "screenshot", chromedp.FullScreenshot(&shot, 100))
	if err := os.WriteFile(filepath.Join(artefacts(t), "cockpit-overview.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	committed := filepath.Join(hosttest.RepoRoot(), readmeShot)
	if os.Getenv("RDMAD_UPDATE_README_SCREENSHOT") == "1" {
		if err := os.WriteFile(committed, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", committed)
	}
	data, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", readmeShot, err)
	}
	fresh, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() != fresh.Bounds().Dx() {
		t.Errorf("%s is %d pixels wide, the page now %d: retake it (RDMAD_UPDATE_README_SCREENSHOT=1 go test -run TestREADMEScreenshot ./test/web/)",
			readmeShot, img.Bounds().Dx(), fresh.Bounds().Dx())
	}
}
