package pkgtest

import (
	"compress/gzip"
	"debug/elf"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// debEntry is one line of `dpkg-deb -c`.
type debEntry struct {
	mode string // "-rwxr-xr-x", "drwxr-xr-x"
	own  string // "root/root"
}

func debContents(t *testing.T, deb string) map[string]debEntry {
	t.Helper()
	requireTool(t, "dpkg-deb")
	got := map[string]debEntry{}
	for _, line := range strings.Split(strings.TrimSpace(run(t, "dpkg-deb", "-c", deb)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb -c line %q", line)
		}
		name := strings.TrimPrefix(f[5], ".")
		if name != "/" {
			got[strings.TrimSuffix(name, "/")] = debEntry{mode: f[0], own: f[1]}
		}
	}
	return got
}

// stagedFiles are the regular files `make install` put into the stage the
// package was built from (plus what build.sh added: gzip'd man pages, docs).
func stagedFiles(t *testing.T, stage string) map[string]fs.FileMode {
	t.Helper()
	files := map[string]fs.FileMode{}
	err := filepath.WalkDir(stage, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files["/"+strings.TrimPrefix(p, stage+"/")] = info.Mode().Perm()
		return nil
	})
	mustf(t, err, "walk stage")
	return files
}

// debOnly are files the .deb has beyond the install layout.
var debOnly = map[string]bool{"/usr/share/lintian/overrides/rdmad": true}

// TestDebShipsTheInstallLayout: every file `make install` installs is in the
// .deb with its mode, owned by root, and nothing else is (so a file added to
// mk/install.mk but not to packaging/nfpm.yaml fails here).
func TestDebShipsTheInstallLayout(t *testing.T) {
	p := build(t, version1)
	deb := debContents(t, p.deb)
	staged := stagedFiles(t, p.stage)
	for _, want := range []string{"/usr/sbin/rdmad", "/usr/bin/rdmactl", "/usr/lib/systemd/system/rdmad.service",
		"/usr/share/dbus-1/system.d/org.rdmad1.conf", "/usr/share/dbus-1/system-services/org.rdmad1.service",
		"/usr/share/polkit-1/actions/org.rdmad1.policy", "/usr/share/rdmad/polkit/50-rdmad-persist-as-runtime.rules",
		"/usr/share/rdmad/prometheus/rdmad-alerts.rules.yml", "/usr/share/rdmad/prometheus/rdmad-fleet.rules.yml",
		"/usr/share/rdmad/prometheus/rdmad-fleet.dashboard.json", "/usr/lib/sysusers.d/rdmad.conf", "/usr/lib/tmpfiles.d/rdmad.conf",
		"/usr/lib/udev/rules.d/90-rdmad.rules", "/usr/share/bash-completion/completions/rdmactl",
		"/usr/share/zsh/vendor-completions/_rdmactl", "/usr/share/fish/vendor_completions.d/rdmactl.fish",
		"/usr/share/man/man8/rdmad.8.gz", "/usr/share/man/man8/rdmactl.8.gz", "/usr/share/man/man5/rdmad.toml.5.gz",
		"/etc/rdma/rdmad.toml", "/usr/share/doc/rdmad/copyright", "/usr/share/doc/rdmad/changelog.gz"} {
		if _, ok := staged[want]; !ok {
			t.Errorf("make install (stage) lacks %s", want)
		}
	}
	var problems []string
	for name, mode := range staged {
		if cockpitFile(name) {
			continue // cockpit-rdmad's (cockpit_test.go)
		}
		e, ok := deb[name]
		switch {
		case !ok:
			problems = append(problems, "not in the .deb: "+name)
		case e.mode[1:] != mode.String()[1:]:
			problems = append(problems, name+": mode "+e.mode+" in the .deb, "+mode.String()+" installed")
		case e.own != "root/root":
			problems = append(problems, name+": owner "+e.own)
		}
	}
	for name, e := range deb {
		if _, ok := staged[name]; !ok && e.mode[0] != 'd' && !debOnly[name] {
			problems = append(problems, "in the .deb but not installed by make install: "+name)
		}
	}
	if e, ok := deb["/etc/rdma/rdmad.d"]; !ok || e.mode != "drwxr-xr-x" {
		problems = append(problems, "no /etc/rdma/rdmad.d directory (0755) in the .deb")
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		t.Errorf("package layout:\n%s", strings.Join(problems, "\n"))
	}
}

// TestDebControl checks the conffile, dependencies and maintainer scripts.
func TestDebControl(t *testing.T) {
	p := build(t, version1)
	ctrl := t.TempDir()
	run(t, "dpkg-deb", "-e", p.deb, ctrl)
	conffiles, err := os.ReadFile(filepath.Join(ctrl, "conffiles"))
	mustf(t, err, "conffiles")
	if got := strings.TrimSpace(string(conffiles)); got != "/etc/rdma/rdmad.toml" {
		t.Errorf("conffiles = %q, want only /etc/rdma/rdmad.toml", got)
	}
	control, err := os.ReadFile(filepath.Join(ctrl, "control"))
	mustf(t, err, "control")
	for _, re := range []string{`(?m)^Package: rdmad$`, `(?m)^Version: ` + regexp.QuoteMeta(version1) + `$`,
		`(?m)^Depends: .*\bsystemd\b`, `(?m)^Depends: .*\bdbus\b`, `(?m)^Maintainer: .+ <.+@.+>$`} {
		must(t, regexp.MustCompile(re).Match(control), "control lacks %s:\n%s", re, control)
	}
	for _, script := range []string{"preinst", "postinst", "prerm", "postrm"} {
		info, err := os.Stat(filepath.Join(ctrl, script))
		if err != nil || info.Mode().Perm() != 0o755 {
			t.Errorf("maintainer script %s: %v (mode %v)", script, err, info)
		}
	}
}

// TestBinariesStaticAndStamped: the packaged binaries have no ELF
// interpreter or shared library (CGO_ENABLED=0) and report the tree's version
// (packaging/version.sh), rdmad and rdmactl alike.
func TestBinariesStaticAndStamped(t *testing.T) {
	p := build(t, version1)
	version := treeVersion(t)
	for _, bin := range []string{"usr/sbin/rdmad", "usr/bin/rdmactl"} {
		path := filepath.Join(p.stage, bin)
		f, err := elf.Open(path)
		mustf(t, err, bin)
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				t.Errorf("%s has an ELF interpreter: dynamically linked", bin)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s needs shared libraries %v", bin, libs)
		}
		if f.Section(".symtab") != nil {
			t.Errorf("%s is not stripped", bin)
		}
		f.Close()
	}
	for _, bin := range []string{"usr/sbin/rdmad", "usr/bin/rdmactl"} {
		name := filepath.Base(bin)
		if out := run(t, filepath.Join(p.stage, bin), "--version"); strings.TrimSpace(out) != name+" "+version {
			t.Errorf("%s --version = %q, want %q", name, out, name+" "+version)
		}
	}
}

// preprocessors is the first line of a man page that names the
// preprocessors man(1) runs before troff (`'\" t` for tbl), if it has one.
var preprocessors = regexp.MustCompile(`^'\\" ([egprtv]+)\n`)

// TestManPagesCompressed: the man pages are gzip'd roff that `man` reads:
// .TH first, after the preprocessor line where there is one, and a page
// with a table (.TS) names tbl there, or man prints the table's source.
func TestManPagesCompressed(t *testing.T) {
	p := build(t, version1)
	pages, _ := filepath.Glob(filepath.Join(p.stage, "usr/share/man/man*/*.gz"))
	if len(pages) != 3 {
		t.Fatalf("man pages %v, want rdmad(8), rdmactl(8), rdmad.toml(5)", pages)
	}
	for _, page := range pages {
		f, err := os.Open(page)
		mustf(t, err, page)
		z, err := gzip.NewReader(f)
		mustf(t, err, page)
		b, err := io.ReadAll(z)
		mustf(t, err, page)
		f.Close()
		text, pre := string(b), ""
		if m := preprocessors.FindStringSubmatch(text); m != nil {
			text, pre = text[len(m[0]):], m[1]
		}
		if !strings.HasPrefix(text, ".TH ") {
			t.Errorf("%s does not start with .TH (after a preprocessor line)", page)
		}
		if strings.Contains(text, "\n.TS") && !strings.Contains(pre, "t") {
			t.Errorf("%s has a table but no '\\\" t line: man would not run tbl", page)
		}
	}
}

// TestLintian runs Debian's lintian on the .deb: no error and no warning
// (the overrides shipped in packaging/deb/lintian-overrides say why).
func TestLintian(t *testing.T) {
	lintian := requireTool(t, "lintian")
	p := build(t, version1)
	out, err := runErr(lintian, "--fail-on", "error,warning", "--display-level", ">=warning", p.deb)
	var tags []string
	for _, line := range strings.Split(out, "\n") {
		if regexp.MustCompile(`^[EWX]: `).MatchString(line) {
			tags = append(tags, line)
		}
	}
	if err != nil || len(tags) > 0 {
		t.Errorf("lintian %s: %v\n%s", filepath.Base(p.deb), err, out)
	}
	// The overrides must still be needed: an unused one hides nothing and
	// would let a new problem of the same name through unnoticed.
	out, _ = runErr(lintian, "--show-overrides", p.deb)
	if n := strings.Count(out, "O: rdmad: "); n != 3 {
		t.Errorf("lintian used %d overrides, want the 3 of packaging/deb/lintian-overrides:\n%s", n, out)
	}
}
