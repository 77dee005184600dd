package pkgtest

import (
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// cockpitFile says whether a staged file belongs to cockpit-rdmad, not rdmad.
func cockpitFile(name string) bool {
	return strings.HasPrefix(name, "/usr/share/cockpit/") || strings.HasPrefix(name, "/usr/share/doc/cockpit-rdmad/")
}

// cockpitPackages are cockpit-rdmad's .deb and .rpm of a `make package`.
func cockpitPackages(t *testing.T, p *packages) (deb, rpm string) {
	t.Helper()
	debs, _ := filepath.Glob(filepath.Join(p.dir, "cockpit-rdmad_*_all.deb"))
	rpms, _ := filepath.Glob(filepath.Join(p.dir, "cockpit-rdmad-*.noarch.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("make package wrote cockpit-rdmad debs %v and rpms %v, want one of each", debs, rpms)
	}
	return debs[0], rpms[0]
}

// TestCockpitPackage: make package writes cockpit-rdmad (.deb and .rpm,
// architecture-independent, Apache-2.0, depending on cockpit-bridge and
// rdmad) holding exactly the page `make install` installs to
// /usr/share/cockpit/rdmad, and lintian finds nothing in the .deb.
func TestCockpitPackage(t *testing.T) {
	p := build(t, version1)
	deb, rpmFile := cockpitPackages(t, p)

	staged := stagedFiles(t, p.stage)
	contents := debContents(t, deb)
	var problems []string
	for name, mode := range staged {
		if !cockpitFile(name) {
			continue
		}
		e, ok := contents[name]
		switch {
		case !ok:
			problems = append(problems, "not in cockpit-rdmad's .deb: "+name)
		case e.mode[1:] != mode.String()[1:] || e.own != "root/root":
			problems = append(problems, name+": "+e.mode+" "+e.own+" in the .deb, "+mode.String()+" installed")
		}
	}
	for name, e := range contents {
		if e.mode[0] != 'd' && !cockpitFile(name) && name != "/usr/share/lintian/overrides/cockpit-rdmad" {
			problems = append(problems, "in cockpit-rdmad's .deb but not the page: "+name)
		}
	}
	for _, want := range []string{"manifest.json", "index.html", "rdmad.js", "rdmad.css"} {
		if _, ok := contents["/usr/share/cockpit/rdmad/"+want]; !ok {
			problems = append(problems, "cockpit-rdmad lacks /usr/share/cockpit/rdmad/"+want)
		}
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		t.Errorf("cockpit-rdmad's .deb:\n%s", strings.Join(problems, "\n"))
	}

	ctrl := run(t, "dpkg-deb", "-f", deb)
	for _, re := range []string{`(?m)^Package: cockpit-rdmad$`, `(?m)^Version: ` + regexp.QuoteMeta(version1) + `$`,
		`(?m)^Architecture: all$`, `(?m)^Depends: cockpit-bridge, rdmad$`} {
		if !regexp.MustCompile(re).MatchString(ctrl) {
			t.Errorf("cockpit-rdmad control lacks %s:\n%s", re, ctrl)
		}
	}
	if cr := run(t, "dpkg-deb", "--fsys-tarfile", deb); !strings.Contains(cr, "License: Apache-2.0") {
		t.Error("cockpit-rdmad's copyright does not say Apache-2.0")
	}

	requireTool(t, "rpm")
	if got := run(t, "rpm", "-qp", "--qf", "%{NAME} %{ARCH} %{LICENSE}\n", rpmFile); got != "cockpit-rdmad noarch Apache-2.0\n" {
		t.Errorf("cockpit-rdmad rpm is %q", got)
	}
	req := run(t, "rpm", "-qpR", rpmFile)
	for _, want := range []string{"cockpit-bridge", "rdmad"} {
		if !regexp.MustCompile(`(?m)^` + want + `$`).MatchString(req) {
			t.Errorf("cockpit-rdmad rpm does not require %s:\n%s", want, req)
		}
	}
	files := run(t, "rpm", "-qpl", rpmFile)
	for _, want := range []string{"/usr/share/cockpit/rdmad/manifest.json", "/usr/share/cockpit/rdmad/rdmad.js"} {
		if !strings.Contains(files, want+"\n") {
			t.Errorf("cockpit-rdmad rpm lacks %s:\n%s", want, files)
		}
	}

	if lintian, err := runErr("sh", "-c", "command -v lintian"); err == nil {
		out, err := runErr(strings.TrimSpace(lintian), "--fail-on", "error,warning", "--display-level", ">=warning", deb)
		if err != nil {
			t.Errorf("lintian %s: %v\n%s", filepath.Base(deb), err, out)
		}
	}
}
