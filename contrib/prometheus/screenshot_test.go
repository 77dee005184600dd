package prometheus

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rdmad/rdmad/daemon/host/hosttest"
)

// screenshot is docs/metrics.md's picture of the fleet's drift.
const screenshot = "docs/prometheus-fleet-drift.png"

// TestFleetDriftScreenshot takes docs/metrics.md's picture: Prometheus's
// graph page for the fleet-drift recording rule, setting:rdmad_drift:hosts,
// on the fleet of TestFleetOnRealPrometheus, where a TOS changed behind
// rdmad's back under [drift] action = "report" drifts on one host. The
// graph page needs Prometheus's web assets, which the binary that
// test/install-deps.sh extracts lacks: Debian's prometheus package
// installs them under /usr/share/prometheus/web with the libjs-* packages
// it depends on; RDMAD_PROMETHEUS_WEB names that directory (or a copy of
// it extracted with those packages). The picture goes to the test's
// artefacts, and with RDMAD_UPDATE_SCREENSHOT=1 to docs/:
//
//	RDMAD_PROMETHEUS_WEB=/usr/share/prometheus/web RDMAD_UPDATE_SCREENSHOT=1 \
//	  go test -run TestFleetDriftScreenshot ./contrib/prometheus/
func TestFleetDriftScreenshot(t *testing.T) {
	web := os.Getenv("RDMAD_PROMETHEUS_WEB")
	if web == "" {
		t.Skip("RDMAD_PROMETHEUS_WEB does not name Prometheus's web assets (a picture for the docs, taken by hand)")
	}
	if _, err := os.Stat(filepath.Join(web, "templates", "graph.html")); err != nil {
		t.Fatalf("RDMAD_PROMETHEUS_WEB=%s: %v", web, err)
	}
	chromium := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			chromium = p
			break
		}
	}
	if chromium == "" {
		missing(t, "chromium")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := startFleet(t, ctx, "--web.local-assets="+web)
	p := f.prom
	// A minute of a fleet that holds its declarations, then the drift,
	// then half a minute of it.
	time.Sleep(60 * time.Second)
	hosttest.Write(t, f.root, host0TOS, "42\n")
	p.eventually("the fleet's drift shows the TOS", func() bool {
		r := p.query(`setting:rdmad_drift:hosts{setting="roce_tos"} == 1`)
		return len(r) == 1
	})
	time.Sleep(30 * time.Second)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, // the test runs as root, where Chromium's sandbox refuses to start
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 800),
		chromedp.Flag("lang", "en-US"),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelCtx := chromedp.NewContext(actx)
	defer cancelCtx()
	page := p.base + "/graph?g0.expr=" + url.QueryEscape("setting:rdmad_drift:hosts") + "&g0.tab=0&g0.stacked=0&g0.range_input=2m"
	var png []byte
	if err := chromedp.Run(bctx,
		chromedp.Navigate(page),
		chromedp.WaitVisible(`svg path`, chromedp.ByQuery),
		chromedp.Sleep(time.Second),
		chromedp.FullScreenshot(&png, 100), // 100: PNG
	); err != nil {
		t.Fatalf("screenshot of %s: %v", page, err)
	}
	dir := filepath.Join(os.TempDir(), "rdmad-prometheus-artefacts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(screenshot))
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", out)
	if os.Getenv("RDMAD_UPDATE_SCREENSHOT") == "1" {
		if err := os.WriteFile(filepath.Join(hosttest.RepoRoot(), screenshot), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
