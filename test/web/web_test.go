// Package web tests rdmad's Cockpit page (cockpit/) in a real headless
// Chromium, served by Debian's real cockpit-ws and cockpit-bridge, talking
// to the real rdmad on a private dbus-daemon serving a fixture host.
//
// cockpit-ws runs with --local-session (no login, no TLS) and the bridge
// finds the page in $XDG_DATA_HOME/cockpit/rdmad; DBUS_SYSTEM_BUS_ADDRESS
// points the bridge's "system bus" at the private bus. Chromium is driven
// over the DevTools protocol with chromedp and opens
// /cockpit/@localhost/rdmad/index.html directly (the Cockpit shell is not
// needed). Screenshots (overview, health, picture, read-only overview) go to
// $RDMAD_WEB_ARTEFACTS (default $TMPDIR/rdmad-web-artefacts).
package web

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/rdmad/rdmad/daemon/fixturekernel"
	"github.com/rdmad/rdmad/daemon/host"
	"github.com/rdmad/rdmad/daemon/host/hosttest"
	"github.com/rdmad/rdmad/test/bustest"
	"github.com/rdmad/rdmad/test/livetest"
	"github.com/rdmad/rdmad/test/testdeps"
)

var bins livetest.Binaries

func TestMain(m *testing.M) { livetest.Main(m, &bins) }

const (
	cockpitWS     = "/usr/lib/cockpit/cockpit-ws"
	cockpitBridge = "/usr/bin/cockpit-bridge"
	pagePath      = "/cockpit/@localhost/rdmad/index.html"
	// hostile is a device name that is HTML with script in it; a sysfs name
	// cannot hold '/', so the markup has no closing tag.
	hostile = `<img src=x onerror=document.title='pwned'>`
)

// need skips the test when a program it drives is missing
// (test/install-deps.sh test installs them all).
func need(t *testing.T) string {
	t.Helper()
	testdeps.File(t, cockpitWS, "cockpit-ws")
	testdeps.File(t, cockpitBridge, "cockpit-bridge")
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testdeps.Missing(t, "chromium", "chromium", nil)
	return ""
}

// artefacts is where screenshots are kept after the test.
func artefacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("RDMAD_WEB_ARTEFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "rdmad-web-artefacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// addDevice makes a Soft-RoCE device appear on the fixture host as the
// kernel shows it in sysfs (a copy of rxe0), with its configfs directory.
func addDevice(t *testing.T, root, name string) {
	t.Helper()
	src := filepath.Join(root, "sys/devices/virtual/infiniband/rxe0")
	dst := filepath.Join(root, "sys/devices/virtual/infiniband", name)
	if err := hosttest.CopyTree(src, dst); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../devices/virtual/infiniband/"+name, filepath.Join(root, "sys/class/infiniband", name)); err != nil {
		t.Fatal(err)
	}
}

// installPage copies cockpit/ to DATA/cockpit/rdmad in a directory every
// user can read (the non-root bridge reads it too) and returns DATA.
func installPage(t *testing.T) string {
	t.Helper()
	data := bustest.PublicDir(t)
	dst := filepath.Join(data, "cockpit", "rdmad")
	if err := hosttest.CopyTree(filepath.Join(hosttest.RepoRoot(), "cockpit"), dst); err != nil {
		t.Fatal(err)
	}
	if err := filepath.Walk(data, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if fi.IsDir() {
			mode = 0o755
		}
		return os.Chmod(p, mode)
	}); err != nil {
		t.Fatal(err)
	}
	return data
}

// startWS runs cockpit-ws with a local session bridge on a free port, as
// uid (0: the test's own user) and returns the page's URL.
func startWS(t *testing.T, busAddr, data string, uid int) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	home := bustest.PublicDir(t) // HOME and XDG_CONFIG_DIRS: no /etc/cockpit
	if uid != 0 {
		if err := os.Chown(home, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(cockpitWS, "--no-tls", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "--local-session="+cockpitBridge)
	cmd.Env = []string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + home,
		"XDG_CONFIG_DIRS=" + home,
		"XDG_DATA_HOME=" + data,
		"XDG_RUNTIME_DIR=" + home,
		"DBUS_SYSTEM_BUS_ADDRESS=" + busAddr,
		"DBUS_SESSION_BUS_ADDRESS=" + busAddr,
		"LANG=C.UTF-8",
	}
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	logs := &livetest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.Dir = home
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("cockpit-ws (uid %d) log:\n%s", uid, logs.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cockpit-ws did not listen on %d: %v\n%s", port, err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Sprintf("http://127.0.0.1:%d%s", port, pagePath)
}

// browser is one headless Chromium with the page's console collected.
type browser struct {
	ctx     context.Context
	mu      sync.Mutex
	console []string
}

func newBrowser(t *testing.T, exe string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, // the test runs as root, where Chromium's sandbox refuses to start
		chromedp.WindowSize(1400, 900),
		chromedp.Flag("lang", "en-US"),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	// Guards a hang only: each step below waits for what it needs.
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	b := &browser{ctx: ctx}
	chromedp.ListenTarget(ctx, func(ev any) {
		var line string
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			line = string(ev.Type) + ": " + strings.Join(args, " ")
		case *runtime.EventExceptionThrown:
			line = "exception: " + ev.ExceptionDetails.Error()
		default:
			return
		}
		b.mu.Lock()
		b.console = append(b.console, line)
		b.mu.Unlock()
	})
	t.Cleanup(func() {
		if t.Failed() {
			b.mu.Lock()
			t.Logf("browser console:\n%s", strings.Join(b.console, "\n"))
			b.mu.Unlock()
		}
	})
	return b
}

func (b *browser) run(t *testing.T, what string, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(b.ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval runs a JavaScript expression in the page and decodes its value.
func (b *browser) eval(t *testing.T, js string, out any) {
	t.Helper()
	b.run(t, "evaluate "+js, chromedp.Evaluate(js, out))
}

// waitFor polls a JavaScript condition until it is true.
func (b *browser) waitFor(t *testing.T, what, js string) {
	t.Helper()
	b.run(t, "wait for "+what, chromedp.Poll(js, nil, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second)))
}

func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	var png []byte
	b.run(t, "screenshot", chromedp.FullScreenshot(&png, 100))
	path := filepath.Join(artefacts(t), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// row is one port row of the overview table as the browser shows it.
type row struct {
	Device, Port, Transport, State, Rate, Netdev, Mode, TOS, Source, Drift string
}

// rowsJS reads each port row; Mode and TOS are the lines of the settings
// cell that the records of those settings make ("now / declared").
const rowsJS = `Array.from(document.querySelectorAll("#ports-body tr[data-port]")).map(tr => {
	const c = Array.from(tr.querySelectorAll("td")).map(td => td.textContent.trim());
	const line = name => { const e = tr.querySelector('[data-setting="' + name + '"]'); return e ? e.lastChild.previousSibling.previousSibling.textContent + " / " + e.lastChild.textContent : ""; };
	return {Device: tr.dataset.device, Port: c[0], Transport: c[1], State: c[2], Rate: c[3], Netdev: c[4],
		Mode: line("roce_mode"), TOS: line("roce_tos"), Source: c[6], Drift: c[c.length - 1]};
})`

func rows(t *testing.T, b *browser) map[string]row {
	t.Helper()
	var list []row
	b.eval(t, rowsJS, &list)
	out := map[string]row{}
	for _, r := range list {
		out[r.Device+"/"+r.Port] = r
	}
	return out
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestCockpitPage opens the page as root: the overview lists the fixture's
// devices and ports with their values, a hostile device name is text, a
// device added to the fixture appears after Reconcile without a reload, and
// setting a TOS with persist writes configfs and rdmad's drop-in.
func TestCockpitPage(t *testing.T) {
	exe := need(t)
	if os.Getuid() != 0 {
		t.Skip("needs root: the bridge runs as root for the administrative view")
	}
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-roce.toml",
		"[[roce]]\ndevice = \"mlx5_*\"\nmode = \"v2\"\ntos = 106\n\n[[roce]]\ndevice = \"mlx4_0\"\ntos = 7\n\n[doctor]\nignore = [\"roce-modes-mixed\"]\n")
	// mlx5_1's TOS cannot be written (a directory where configfs has the
	// file): its port drifts.
	tos1 := filepath.Join(root, "sys/kernel/config/rdma_cm/mlx5_1/ports/1/default_roce_tos")
	if err := os.Remove(tos1); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(tos1, 0o755); err != nil {
		t.Fatal(err)
	}
	addDevice(t, root, hostile)
	livetest.Start(t, bins, addr, root, env)
	url := startWS(t, addr, installPage(t), 0)

	b := newBrowser(t, exe)
	b.run(t, "open "+url, chromedp.Navigate(url))
	b.waitFor(t, "the page to connect", `document.body.dataset.ready === "yes" && document.querySelectorAll("#ports-body tr[data-port]").length > 0`)
	b.waitFor(t, "administrative access", `!document.getElementById("reconcile").disabled`)

	got := rows(t, b)
	want := map[string]row{
		"mlx5_0/1":     {Transport: "roce", State: "ACTIVE", Mode: "RoCE v2 / RoCE v2", TOS: "106 / 106", Drift: "✓ as declared"},
		"mlx5_1/1":     {Transport: "roce", State: "ACTIVE", Drift: "drift: RoCE TOS"},
		"mlx4_0/1":     {Transport: "infiniband", State: "ACTIVE", Drift: "not applicable"},
		"mlx4_0/2":     {Transport: "roce", State: "ACTIVE", TOS: "7 / 7", Drift: "✓ as declared"},
		"rxe0/1":       {Transport: "roce", State: "ACTIVE", Drift: "not declared"},
		hostile + "/1": {Transport: "roce", State: "ACTIVE", Drift: "not declared"},
	}
	for key, w := range want {
		g, ok := got[key]
		if !ok {
			t.Errorf("overview has no row %s; rows: %v", key, got)
			continue
		}
		for _, f := range [][3]string{{"transport", w.Transport, g.Transport}, {"state", w.State, g.State}, {"mode", w.Mode, g.Mode}, {"tos", w.TOS, g.TOS}, {"drift", w.Drift, g.Drift}} {
			if f[1] != "" && !strings.HasPrefix(f[2], f[1]) {
				t.Errorf("%s %s = %q, want %q", key, f[0], f[2], f[1])
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("overview has %d port rows, want %d: %v", len(got), len(want), got)
	}
	if g := got["mlx5_0/1"]; !regexp.MustCompile(`50-roce\.toml:1$`).MatchString(g.Source) || g.Netdev == "" || g.Rate == "" {
		t.Errorf("mlx5_0/1 lacks its declaration's file:line, netdev or rate: %+v", g)
	}

	// The hostile name is shown as text: no element came of it, no script ran.
	var hostileOK bool
	b.eval(t, `(() => {
		const th = Array.from(document.querySelectorAll("#ports-body th.device .devname")).find(e => e.textContent === `+strconv.Quote(hostile)+`);
		return Boolean(th) && document.querySelectorAll("img").length === 0 && document.title === "RDMA";
	})()`, &hostileOK)
	if !hostileOK {
		t.Error("the hostile device name is not shown as text (an element was made of it, a script ran, or the row is missing)")
	}
	b.screenshot(t, "overview-admin.png")

	// A device added to the fixture appears after Reconcile, without a reload.
	b.eval(t, `window.rdmadTestMarker = "same page"`, nil)
	addDevice(t, root, "rxe9")
	b.run(t, "open Health", chromedp.Click("#tab-health", chromedp.ByID))
	b.waitFor(t, "the findings", `document.querySelectorAll("#findings .finding").length > 0`)
	// Findings are grouped fail, warn, ignored, ok; each that is not ok
	// says its fix, an ignored one what it was and the entry that ignores
	// it ([doctor] ignore of the drop-in above).
	var health struct {
		Groups  []string
		NotOK   int
		NoFix   []string
		Ignored []string
	}
	b.eval(t, `({Groups: Array.from(document.querySelectorAll("#findings section[data-severity]")).map(s => s.dataset.severity),
		NotOK: document.querySelectorAll("#findings .finding-fail, #findings .finding-warn").length,
		NoFix: Array.from(document.querySelectorAll("#findings .finding-fail, #findings .finding-warn")).filter(li => !li.querySelector(".fix code") || !li.querySelector(".fix code").textContent).map(li => li.textContent),
		Ignored: Array.from(document.querySelectorAll("#findings .finding-ignored .ignored-by")).map(e => e.textContent)})`, &health)
	if g := strings.Join(health.Groups, ","); g != "fail,warn,ignored,ok" && g != "warn,ignored,ok" && g != "fail,ignored,ok" {
		t.Errorf("health groups are %v, want fail, warn, ignored, ok in that order", health.Groups)
	}
	if len(health.Ignored) != 1 || !regexp.MustCompile(`^warn, ignored by .*/etc/rdma/rdmad\.d/50-roce\.toml:11$`).MatchString(health.Ignored[0]) {
		t.Errorf("ignored findings %q, want roce-modes-mixed ignored by 50-roce.toml:11", health.Ignored)
	}
	if health.NotOK == 0 || len(health.NoFix) > 0 {
		t.Errorf("health: %d findings not ok (mlx5_1's refused TOS is one), %d without their fix: %q", health.NotOK, len(health.NoFix), health.NoFix)
	}
	b.screenshot(t, "health-admin.png")
	b.run(t, "reconcile", chromedp.Click("#reconcile", chromedp.ByID))
	b.waitFor(t, "the reconcile result", `/^Reconciled: /.test(document.getElementById("reconcile-result").textContent)`)
	b.run(t, "open Overview", chromedp.Click("#tab-overview", chromedp.ByID))
	b.waitFor(t, "rxe9 in the overview", `document.querySelector('#ports-body tr[data-device="rxe9"][data-port="1"]') !== null`)
	var marker string
	b.eval(t, `window.rdmadTestMarker`, &marker)
	if marker != "same page" {
		t.Error("the page was reloaded to show the new device")
	}

	// Setting a TOS with persist writes configfs and the drop-in.
	b.run(t, "set TOS 42 on mlx5_0/1",
		chromedp.Click("#tab-change", chromedp.ByID),
		chromedp.SetValue("#roce-port", `["mlx5_0",1]`, chromedp.ByID),
		chromedp.SetValue("#roce-tos", "42", chromedp.ByID),
		chromedp.Click("#roce-apply", chromedp.ByID),
	)
	b.waitFor(t, "the SetRoCE result", `document.getElementById("roce-result").classList.contains("ok")`)
	if got := read(t, filepath.Join(root, "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos")); got != "42" {
		t.Errorf("configfs default_roce_tos of mlx5_0/1 = %q, want 42", got)
	}
	dropIn := read(t, filepath.Join(root, "etc/rdma/rdmad.d/zz-rdmad-persist.toml"))
	if !regexp.MustCompile(`(?s)device = "mlx5_0".*tos = 42`).MatchString(dropIn) {
		t.Errorf("rdmad's drop-in does not declare tos 42 for mlx5_0:\n%s", dropIn)
	}
	// A value the kernel refuses (mlx5_1's TOS cannot be written) is a
	// sentence, not a D-Bus error name.
	b.run(t, "set TOS 50 on mlx5_1/1",
		chromedp.SetValue("#roce-port", `["mlx5_1",1]`, chromedp.ByID),
		chromedp.SetValue("#roce-tos", "50", chromedp.ByID),
		chromedp.Click("#roce-apply", chromedp.ByID),
	)
	b.waitFor(t, "the refusal", `document.getElementById("roce-result").classList.contains("fail")`)
	var refusal string
	b.eval(t, `document.getElementById("roce-result").textContent`, &refusal)
	if !strings.HasPrefix(refusal, "The kernel refused to set RoCE on mlx5_1 port 1; nothing was left half-applied.") || strings.Contains(refusal, "org.rdmad1.Error") {
		t.Errorf("the kernel's refusal reads %q", refusal)
	}
	// The lossless RoCE form sends SetQoSSettings with its variants (a
	// wrong signature or variant type would be InvalidArgs): the fixture's
	// ConnectX-5 takes them into its DCB and ethtool state
	// (fixture/kernel.json), and a value out of range is refused naming
	// its key before anything is tried.
	b.run(t, "set pause off and PFC 3 on mlx5_0/1",
		chromedp.SetValue("#qos-port", `["mlx5_0",1]`, chromedp.ByID),
		chromedp.SetValue("#qos-pfc", "3", chromedp.ByID),
		chromedp.SetValue("#qos-pause", "off", chromedp.ByID),
		chromedp.SetValue("#qos-cable-length", "10", chromedp.ByID),
		chromedp.Click("#qos-apply", chromedp.ByID),
	)
	b.waitFor(t, "the SetQoSSettings result", `/^result (ok|fail)$/.test(document.getElementById("qos-result").className)`)
	var qosResult string
	b.eval(t, `document.getElementById("qos-result").textContent`, &qosResult)
	if !strings.HasPrefix(qosResult, "Set mlx5_0 port 1") {
		t.Errorf("the lossless form's result reads %q", qosResult)
	}
	state, err := fixturekernel.New(host.New(root)).Read()
	if err != nil {
		t.Fatal(err)
	}
	if n := state.Netdevs["ens1f0np0"]; !slices.Equal(n.DCB.PFC.Enabled, []int{3}) || n.Pause.RX || n.Pause.TX || n.DCB.PFC.Delay != 10 {
		t.Errorf("after the lossless form, ens1f0np0 holds PFC %v, pause %+v, cable %d m", n.DCB.PFC.Enabled, *n.Pause, n.DCB.PFC.Delay)
	}
	var cleared bool
	b.eval(t, `(() => { for (const id of ["qos-pfc", "qos-pause", "qos-cable-length"]) document.getElementById(id).value = ""; return true; })()`, &cleared)
	b.run(t, "set a PFC storm timeout of 50 ms",
		chromedp.SetValue("#qos-pfc-storm-timeout", "50", chromedp.ByID),
		chromedp.Click("#qos-apply", chromedp.ByID),
	)
	b.waitFor(t, "the range refusal", `/rdmad refused a value: .*pfc_storm_timeout: 50 is out of range/.test(document.getElementById("qos-result").textContent)`)
	// A link name rdmad refuses (white space) is refused before anything is
	// touched, and said as a sentence.
	b.run(t, "add link \"bad name\"",
		chromedp.SetValue("#link-name", "bad name", chromedp.ByID),
		chromedp.SetValue("#link-netdev", "ens2", chromedp.ByID),
		chromedp.Click("#link-add", chromedp.ByID),
	)
	b.waitFor(t, "the link refusal", `document.getElementById("link-result").classList.contains("fail")`)
	var linkMsg string
	b.eval(t, `document.getElementById("link-result").textContent`, &linkMsg)
	if !strings.HasPrefix(linkMsg, "rdmad refused a value: ") || strings.Contains(linkMsg, "org.freedesktop") {
		t.Errorf("the refused link reads %q", linkMsg)
	}
	b.run(t, "open Overview", chromedp.Click("#tab-overview", chromedp.ByID))
	b.waitFor(t, "TOS 42 in the overview", `(() => { const tr = document.querySelector('#ports-body tr[data-device="mlx5_0"][data-port="1"]');
		const tos = tr && tr.querySelector('[data-setting="roce_tos"]');
		return tos && tos.textContent === "RoCE TOS 42 / 42"; })()`)
	b.run(t, "open Picture", chromedp.Click("#tab-picture", chromedp.ByID))
	var nodes int
	b.eval(t, `document.querySelectorAll("#topology svg g.node").length`, &nodes)
	if nodes < len(want)+1 {
		t.Errorf("the picture has %d nodes, want at least one per port and device", nodes)
	}
	b.screenshot(t, "picture-admin.png")

	// After every tab has rendered the hostile name (overview, health,
	// change's port list, picture), still no element or script came of it.
	var clean bool
	b.eval(t, `document.querySelectorAll("img, image, script:not([src])").length === 0 && document.title === "RDMA" &&
		Array.from(document.querySelectorAll("#topology svg title")).some(e => e.textContent.startsWith(`+strconv.Quote(hostile)+`))`, &clean)
	if !clean {
		t.Error("after every tab rendered, the hostile device name made an element or ran a script (or is missing from the picture)")
	}
}

// TestCockpitPageReadOnly runs cockpit-ws and its bridge as an unprivileged
// user: the page shows the devices read-only, says administrative access is
// required, and a change forced through anyway is refused by rdmad and shown
// as that sentence, not as a D-Bus error.
func TestCockpitPageReadOnly(t *testing.T) {
	exe := need(t)
	if os.Getuid() != 0 {
		t.Skip("needs root to run the bridge as another user")
	}
	const nobody = 65534
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	livetest.Start(t, bins, addr, root, env)
	url := startWS(t, addr, installPage(t), nobody)

	b := newBrowser(t, exe)
	b.run(t, "open "+url, chromedp.Navigate(url))
	b.waitFor(t, "the page to connect", `document.body.dataset.ready === "yes" && document.querySelectorAll("#ports-body tr[data-port]").length > 0`)
	b.waitFor(t, "the read-only state", `document.body.classList.contains("read-only")`)
	var state struct {
		Access   string
		Disabled bool
		Note     bool
	}
	b.eval(t, `({Access: document.getElementById("access").textContent,
		Disabled: Array.from(document.querySelectorAll(".admin-only")).every(e => e.disabled),
		Note: !document.getElementById("readonly-note").hidden})`, &state)
	if !strings.Contains(state.Access, "administrative access required") || !state.Disabled || !state.Note {
		t.Errorf("the non-root page is not read-only: %+v", state)
	}
	b.screenshot(t, "overview-readonly.png")

	// Force a change through the disabled form: rdmad refuses (no polkit on
	// the private bus) and the page says why in a sentence.
	b.run(t, "force SetRoCE",
		chromedp.Click("#tab-change", chromedp.ByID),
		chromedp.Evaluate(`for (const e of document.querySelectorAll(".admin-only")) e.disabled = false; document.getElementById("roce-tos").value = "7"; document.getElementById("roce-apply").click()`, nil),
	)
	b.waitFor(t, "the refusal", `document.getElementById("roce-result").classList.contains("fail")`)
	var msg string
	b.eval(t, `document.getElementById("roce-result").textContent`, &msg)
	if !strings.HasPrefix(msg, "Administrative access required: rdmad refused to set RoCE") || strings.Contains(msg, "org.freedesktop") {
		t.Errorf("the refusal reads %q, want the administrative-access sentence", msg)
	}
	if got := read(t, filepath.Join(root, "sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos")); got == "7" {
		t.Error("the refused call changed configfs")
	}
}

// TestCockpitSaysWhatIsInForce: at a first boot whose files do not load,
// nothing is declared, and the page says so (it said the last good
// configuration stayed in force).
func TestCockpitSaysWhatIsInForce(t *testing.T) {
	exe := need(t)
	if os.Getuid() != 0 {
		t.Skip("needs root: the bridge runs as root for the administrative view")
	}
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	hosttest.Write(t, root, "etc/rdma/rdmad.d/60-bad.toml", "[[roce]]\ndevice = \"x\"\ntos = 1060\n")
	livetest.Start(t, bins, addr, root, env)
	url := startWS(t, addr, installPage(t), 0)

	b := newBrowser(t, exe)
	b.run(t, "open "+url, chromedp.Navigate(url))
	b.waitFor(t, "the page to connect", `document.body.dataset.ready === "yes" && !document.getElementById("banner").hidden`)
	var text struct{ Banner, Summary string }
	b.eval(t, `({Banner: document.getElementById("banner").textContent, Summary: document.getElementById("summary").textContent})`, &text)
	if !strings.Contains(text.Banner, "in force instead: nothing declared") || !strings.Contains(text.Banner, "60-bad.toml:3") ||
		strings.Contains(text.Banner, "last good configuration stays") || !strings.Contains(text.Summary, "in force: nothing declared") {
		t.Errorf("the page says %+v, want nothing declared in force and the error", text)
	}
}

// TestCockpitPageFollowsAPIChanges: with [api] changes = "runtime" the page
// says so with its file:line and turns "keep after reboot" off, a change
// still goes through at runtime, and a value persisted before over a
// file's is an override finding with its unset command; with "none"
// every control that declares is off (Reconcile is not), and a change
// forced through is refused as a sentence naming the file.
func TestCockpitPageFollowsAPIChanges(t *testing.T) {
	exe := need(t)
	if os.Getuid() != 0 {
		t.Skip("needs root: the bridge runs as root for the administrative view")
	}
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-roce.toml", "[[roce]]\ndevice = \"mlx5_*\"\nmode = \"v2\"\ntos = 106\n")
	hosttest.Write(t, root, "etc/rdma/rdmad.d/10-api.toml", "[api]\nchanges = \"runtime\"\n")
	dropIn := filepath.Join(root, "etc/rdma/rdmad.d/zz-rdmad-persist.toml")
	hosttest.Write(t, root, "etc/rdma/rdmad.d/zz-rdmad-persist.toml",
		"# Managed by rdmad: changes made with rdmactl --persist / D-Bus. Edit other files instead.\n\n[[roce]]\ndevice = \"mlx5_0\"\nport = 1\ntos = 0\n")
	livetest.Start(t, bins, addr, root, env)
	url := startWS(t, addr, installPage(t), 0)
	apiFile := filepath.Join(root, "etc/rdma/rdmad.d/10-api.toml")

	b := newBrowser(t, exe)
	b.run(t, "open "+url, chromedp.Navigate(url), chromedp.Click("#tab-change", chromedp.ByID))
	b.waitFor(t, "the [api] note", `!document.getElementById("api-note").hidden && document.body.dataset.ready === "yes" && !document.getElementById("reconcile").disabled`)
	type controls struct {
		Note                string
		Persist             []bool // disabled
		PersistChecked      []bool
		Declares, Reconcile bool // disabled
	}
	const controlsJS = `({Note: document.getElementById("api-note").textContent,
		Persist: ["roce-persist", "link-persist", "netns-persist"].map(id => document.getElementById(id).disabled),
		PersistChecked: ["roce-persist", "link-persist", "netns-persist"].map(id => document.getElementById(id).checked),
		Declares: ["roce-apply", "link-add", "netns-apply", "roce-tos"].every(id => document.getElementById(id).disabled),
		Reconcile: document.getElementById("reconcile").disabled})`
	var c controls
	b.eval(t, controlsJS, &c)
	if !strings.Contains(c.Note, `[api] changes = "runtime" (`+apiFile+`:2)`) || strings.Contains(fmt.Sprint(c.Persist), "false") ||
		strings.Contains(fmt.Sprint(c.PersistChecked), "true") || c.Declares || c.Reconcile {
		t.Errorf("under [api] changes = runtime: %+v", c)
	}
	b.screenshot(t, "change-api-runtime.png")

	// A runtime change still goes through; the drop-in is left alone.
	b.run(t, "set TOS 42 on mlx5_1/1",
		chromedp.SetValue("#roce-port", `["mlx5_1",1]`, chromedp.ByID),
		chromedp.SetValue("#roce-tos", "42", chromedp.ByID),
		chromedp.Click("#roce-apply", chromedp.ByID),
	)
	b.waitFor(t, "the SetRoCE result", `document.getElementById("roce-result").classList.contains("ok")`)
	if got := read(t, filepath.Join(root, "sys/kernel/config/rdma_cm/mlx5_1/ports/1/default_roce_tos")); got != "42" {
		t.Errorf("configfs TOS of mlx5_1/1 = %q, want 42", got)
	}
	if got := read(t, dropIn); strings.Contains(got, "mlx5_1") {
		t.Errorf("a runtime change reached the drop-in:\n%s", got)
	}

	// The persisted TOS over 50-roce.toml's is an override, with its fix.
	b.run(t, "open Health", chromedp.Click("#tab-health", chromedp.ByID))
	b.waitFor(t, "the override finding", `document.querySelector('#findings .finding-warn[data-id="override"]') !== null`)
	var override struct{ Text, Fix string }
	b.eval(t, `(() => { const li = Array.from(document.querySelectorAll('#findings .finding-warn[data-id="override"]')).find(li => li.querySelector(".subject").textContent === "mlx5_0/1");
		return li ? {Text: li.querySelector(".text").textContent, Fix: li.querySelector(".fix code").textContent} : {}; })()`, &override)
	if !strings.Contains(override.Text, "RoCE TOS 0 (persisted at "+dropIn) || !strings.Contains(override.Text, "overrides 106 declared at "+filepath.Join(root, "etc/rdma/rdmad.d/50-roce.toml:1")) ||
		!strings.Contains(override.Text, `[api] changes = "runtime"`) || override.Fix != "rdmactl roce unset mlx5_0/1 --persist" {
		t.Errorf("the override finding of mlx5_0/1: %+v", override)
	}
	b.screenshot(t, "health-override.png")

	// "none": every declaring control goes off, Reconcile stays.
	hosttest.Write(t, root, "etc/rdma/rdmad.d/10-api.toml", "[api]\nchanges = \"none\"\n")
	if out, err := exec.Command(bins.Rdmactl, "--bus", addr, "reload").CombinedOutput(); err != nil {
		t.Fatalf("rdmactl reload: %v\n%s", err, out)
	}
	b.run(t, "open Change", chromedp.Click("#tab-change", chromedp.ByID))
	b.waitFor(t, "the controls off", `document.getElementById("roce-apply").disabled && /"none"/.test(document.getElementById("api-note").textContent)`)
	b.eval(t, controlsJS, &c)
	if !c.Declares || c.Reconcile || !strings.Contains(c.Note, apiFile+":2") {
		t.Errorf("under [api] changes = none: %+v", c)
	}
	b.run(t, "force SetRoCE",
		chromedp.Evaluate(`for (const e of document.querySelectorAll(".declares")) e.disabled = false; document.getElementById("roce-tos").value = "7"; document.getElementById("roce-apply").click()`, nil),
	)
	b.waitFor(t, "the refusal", `document.getElementById("roce-result").classList.contains("fail")`)
	var msg string
	b.eval(t, `document.getElementById("roce-result").textContent`, &msg)
	if !strings.HasPrefix(msg, "This host's configuration does not let changes be made here: "+apiFile+`:2: [api] changes = "none"`) {
		t.Errorf("the refusal reads %q", msg)
	}
	b.screenshot(t, "change-api-none.png")
}

// TestCockpitShowsCorrections: when another process changes a setting
// rdmad keeps and rdmad puts it back, the overview marks the setting with
// a corrected badge counting the corrections (Port.Corrected), without a
// reload of the page.
func TestCockpitShowsCorrections(t *testing.T) {
	exe := need(t)
	if os.Getuid() != 0 {
		t.Skip("needs root: the bridge runs as root for the administrative view")
	}
	addr := bustest.Start(t)
	root, env := livetest.DemoHost(t)
	hosttest.Write(t, root, "etc/rdma/rdmad.d/50-roce.toml", "[[roce]]\ndevice = \"mlx5_*\"\nmode = \"v2\"\ntos = 106\n")
	livetest.Start(t, bins, addr, root, env)
	url := startWS(t, addr, installPage(t), 0)

	b := newBrowser(t, exe)
	b.run(t, "open "+url, chromedp.Navigate(url))
	const tosLine = `document.querySelector('#ports-body tr[data-device="mlx5_0"][data-port="1"] [data-setting="roce_tos"]')`
	b.waitFor(t, "mlx5_0/1's TOS as declared", `(() => { const e = `+tosLine+`; return e !== null && e.textContent.startsWith("RoCE TOS 106 / 106"); })()`)
	var badges int
	b.eval(t, `document.querySelectorAll("#ports-body .corrected").length`, &badges)
	if badges != 0 {
		t.Fatalf("%d corrected badges before any correction", badges)
	}
	tos := filepath.Join(root, host.ConfigfsPortPath("mlx5_0", 1, "default_roce_tos"))
	for n := 1; n <= 2; n++ {
		// Another process writes the TOS; rdmad puts 106 back.
		if err := os.WriteFile(tos, []byte("0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		b.waitFor(t, fmt.Sprintf("the badge of correction %d", n), `(() => { const e = `+tosLine+` ; const c = e && e.querySelector(".corrected");
			return c !== null && c.dataset.corrected === "`+strconv.Itoa(n)+`" && c.textContent === "corrected `+strconv.Itoa(n)+`×"; })()`)
	}
	var line string
	b.eval(t, tosLine+`.textContent`, &line)
	if line != "RoCE TOS 106 / 106corrected 2×" {
		t.Errorf("mlx5_0/1's TOS line reads %q", line)
	}
	b.eval(t, `document.querySelectorAll("#ports-body .corrected").length`, &badges)
	if badges != 1 {
		t.Errorf("%d corrected badges, want mlx5_0/1's TOS only", badges)
	}
	b.screenshot(t, "overview-corrected.png")
}
