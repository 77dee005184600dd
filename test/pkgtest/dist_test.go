package pkgtest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// The source tarball of `make dist`, built once, and the tree it unpacks to.
type sourceDist struct {
	tarball, sbom string // dist/rdmad-<version>.tar.gz and .cdx.json
	version       string // the tarball's VERSION
	tree          string // the tarball unpacked (read-only use: copy to build)
}

var (
	distOnce sync.Once
	distErr  string
	dist     sourceDist
)

func makeDist(t *testing.T, out string) (tarball string) {
	t.Helper()
	cmd := exec.Command(requireTool(t, "make"), "-C", repo, "--no-print-directory", "dist")
	cmd.Env = append(os.Environ(), "DIST="+out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make dist: %v\n%s", err, b)
	}
	tars, _ := filepath.Glob(filepath.Join(out, "rdmad-*.tar.gz"))
	if len(tars) != 1 {
		t.Fatalf("make dist wrote %v, want one tarball\n%s", tars, b)
	}
	return tars[0]
}

// getDist runs `make dist` once for every test of this file and unpacks
// the tarball.
func getDist(t *testing.T) sourceDist {
	t.Helper()
	requireTool(t, "make")
	distOnce.Do(func() { distErr = prepareDist() })
	if distErr != "" {
		t.Fatal(distErr)
	}
	return dist
}

func prepareDist() string {
	out := filepath.Join(workDir, "dist")
	cmd := exec.Command("make", "-C", repo, "--no-print-directory", "dist")
	cmd.Env = append(os.Environ(), "DIST="+out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return "make dist: " + err.Error() + "\n" + string(b)
	}
	tars, _ := filepath.Glob(filepath.Join(out, "rdmad-*.tar.gz"))
	if len(tars) != 1 {
		return "make dist wrote no single tarball:\n" + string(b)
	}
	tree := filepath.Join(workDir, "dist-tree")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return err.Error()
	}
	if b, err := exec.Command("tar", "-C", tree, "-xzf", tars[0]).CombinedOutput(); err != nil {
		return "untar: " + err.Error() + "\n" + string(b)
	}
	name := strings.TrimSuffix(filepath.Base(tars[0]), ".tar.gz")
	dist = sourceDist{tarball: tars[0], sbom: filepath.Join(out, name+".cdx.json"), tree: filepath.Join(tree, name)}
	v, err := os.ReadFile(filepath.Join(dist.tree, "VERSION"))
	if err != nil {
		return "the tarball has no VERSION: " + err.Error()
	}
	dist.version = strings.TrimSpace(string(v))
	return ""
}

// copyTree copies the unpacked tarball for a build that writes in it.
func copyTree(t *testing.T, d sourceDist) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(d.tree))
	if out, err := exec.Command("cp", "-a", d.tree, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	return dst
}

// TestDistTarball: the tarball is rdmad-<version>/ with the tracked files,
// the vendored modules, the version, debian/ and the spec with the version
// in; nothing of git or of a build; the same commit gives the same bytes.
func TestDistTarball(t *testing.T) {
	d := getDist(t)
	if want := treeVersion(t); d.version != want {
		t.Errorf("the tarball's VERSION is %q, the tree's %q", d.version, want)
	}
	if filepath.Base(d.tarball) != "rdmad-"+d.version+".tar.gz" {
		t.Errorf("tarball named %s", filepath.Base(d.tarball))
	}
	list := run(t, "tar", "-tzf", d.tarball)
	prefix := "rdmad-" + d.version + "/"
	names := map[string]bool{}
	for _, n := range strings.Split(strings.TrimSpace(list), "\n") {
		if !strings.HasPrefix(n, prefix) {
			t.Errorf("%s is outside %s", n, prefix)
		}
		names[strings.TrimPrefix(n, prefix)] = true
	}
	for _, want := range []string{"VERSION", "REVISION", "go.mod", "go.sum", "Makefile", "LICENSE", "CHANGELOG.md",
		"vendor/modules.txt", "vendor/github.com/godbus/dbus/v5/LICENSE", "rdmad.spec", "packaging/rpm/rdmad.spec", "rdmad.cdx.json",
		"debian/control", "debian/rules", "debian/changelog", "debian/copyright", "debian/source/format",
		"debian/rdmad.postinst", "debian/rdmad.preinst", "debian/rdmad.prerm", "debian/rdmad.postrm",
		"debian/rdmad.install", "debian/cockpit-rdmad.install", "debian/cockpit-rdmad.copyright", "debian/rdmad.lintian-overrides"} {
		if !names[want] {
			t.Errorf("the tarball lacks %s", want)
		}
	}
	for n := range names {
		for _, bad := range []string{".git/", "bin/", "dist/", ".tools/"} {
			if strings.HasPrefix(n, bad) {
				t.Errorf("the tarball carries %s", n)
			}
		}
	}
	spec, err := os.ReadFile(filepath.Join(d.tree, "rdmad.spec"))
	mustf(t, err, "spec")
	if bytes.Contains(spec, []byte("@VERSION@")) || bytes.Contains(spec, []byte("@PKG_VERSION@")) ||
		!bytes.Contains(spec, []byte("%global rdmad_version "+d.version+"\n")) {
		t.Errorf("the spec does not carry version %s", d.version)
	}
	changelog, err := os.ReadFile(filepath.Join(d.tree, "debian/changelog"))
	mustf(t, err, "changelog")
	pkgVersion := strings.TrimSpace(run(t, filepath.Join(repo, "packaging/version.sh"), "--package", d.version))
	if !bytes.HasPrefix(changelog, []byte("rdmad ("+pkgVersion+") ")) {
		t.Errorf("debian/changelog starts %q, want version %s", strings.SplitN(string(changelog), "\n", 2)[0], pkgVersion)
	}
	shipped, err := os.ReadFile(filepath.Join(d.tree, "debian/copyright"))
	mustf(t, err, "debian/copyright")
	if src, _ := os.ReadFile(filepath.Join(repo, "packaging/copyright")); !bytes.Equal(shipped, src) {
		t.Errorf("debian/copyright is not packaging/copyright")
	}

	// Reproducible: a second make dist of the same tree writes the same bytes.
	again := makeDist(t, t.TempDir())
	a, err := os.ReadFile(d.tarball)
	mustf(t, err, "tarball")
	b, err := os.ReadFile(again)
	mustf(t, err, "second tarball")
	if !bytes.Equal(a, b) {
		t.Errorf("two make dist runs of the same tree wrote different tarballs")
	}
}

// offlineEnv is the environment of a build that may use nothing but the
// tarball: no proxy, an empty module cache, vendored modules, this Go.
// -trimpath, as the packages are built, keeps the source directory out of
// the build cache's keys: the builds from copies of the tarball then share
// their compiled packages with each other and with `make package` (each
// is otherwise a full compile, minutes on two cores), and the outputs do
// not change.
func offlineEnv(t *testing.T) []string {
	env := []string{"GOFLAGS=-mod=vendor -trimpath", "GOPROXY=off", "GOMODCACHE=" + t.TempDir(), "GOTOOLCHAIN=local"}
	for _, e := range os.Environ() {
		if k, _, _ := strings.Cut(e, "="); k != "GOFLAGS" && k != "GOPROXY" && k != "GOMODCACHE" && k != "GOTOOLCHAIN" {
			env = append(env, e)
		}
	}
	return env
}

// goCache is the build cache of the go that runs the tests.
func goCache(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOCACHE: %q %v", out, err)
	}
	return strings.TrimSpace(string(out))
}

// TestDistBuildsOffline: `make build` in the unpacked tarball with no
// network and an empty module cache, and the binaries say the tarball's
// version.
func TestDistBuildsOffline(t *testing.T) {
	d := getDist(t)
	tree := copyTree(t, d)
	cmd := exec.Command("make", "--no-print-directory", "build")
	cmd.Dir = tree
	cmd.Env = offlineEnv(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build in the tarball, offline: %v\n%s", err, out)
	}
	for _, bin := range []string{"rdmad", "rdmactl"} {
		if out := strings.TrimSpace(run(t, filepath.Join(tree, "bin", bin), "--version")); out != bin+" "+d.version {
			t.Errorf("%s --version = %q, want %q", bin, out, bin+" "+d.version)
		}
	}
}

// rpmFiles lists an rpm's files as "flags mode owner:group path", without
// the doc flag rpmbuild gives files under /usr/share/doc and the man pages.
func rpmFiles(t *testing.T, rpmFile string) []string {
	t.Helper()
	out := run(t, "rpm", "-qp", "--qf", `[%{FILEFLAGS:fflags} %{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILENAMES}\n]`, rpmFile)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		flags, rest, _ := strings.Cut(l, " ")
		lines = append(lines, strings.ReplaceAll(flags, "d", "")+" "+rest)
	}
	sort.Strings(lines)
	return lines
}

func nfpmPackage(t *testing.T, p *packages, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(p.dir, pattern))
	if len(m) != 1 {
		t.Fatalf("nfpm packages %s: %v", pattern, m)
	}
	return m[0]
}

// TestDistRPM: rpmbuild --nodeps -bb with packaging/rpm/rdmad.spec from the
// tarball (rpm's macros as Debian's rpm has them: no systemd macros) builds
// rdmad and cockpit-rdmad with the files, modes, config and ghost flags,
// scriptlets and weak dependencies of the nfpm packages.
func TestDistRPM(t *testing.T) {
	requireTool(t, "rpmbuild")
	d := getDist(t)
	nfpm := build(t, version1)
	top := t.TempDir()
	mustf(t, os.MkdirAll(filepath.Join(top, "SOURCES"), 0o755), "SOURCES")
	tarball, err := os.ReadFile(d.tarball)
	mustf(t, err, "tarball")
	mustf(t, os.WriteFile(filepath.Join(top, "SOURCES", filepath.Base(d.tarball)), tarball, 0o644), "copy tarball")
	cmd := exec.Command("rpmbuild", "--nodeps", "-bb", "--define", "_topdir "+top, filepath.Join(d.tree, "rdmad.spec"))
	cmd.Env = offlineEnv(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("rpmbuild: %v\n%s", err, out)
	}
	for _, name := range []string{"rdmad", "cockpit-rdmad"} {
		built, _ := filepath.Glob(filepath.Join(top, "RPMS", "*", name+"-[0-9]*.rpm"))
		if len(built) != 1 {
			t.Fatalf("rpmbuild wrote %v for %s", built, name)
		}
		ref := nfpmPackage(t, nfpm, name+"-[0-9]*.rpm")
		if got, want := rpmFiles(t, built[0]), rpmFiles(t, ref); !slices.Equal(got, want) {
			t.Errorf("%s: the spec's files differ from the nfpm package's:\nspec:\n%s\nnfpm:\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		lines := func(q, pkg string) string { // one relation a line, in no order rpm promises
			l := strings.Split(run(t, "rpm", "-qp", q, pkg), "\n")
			if q != "--scripts" {
				sort.Strings(l)
			}
			return strings.Join(l, "\n")
		}
		for _, q := range []string{"--scripts", "--recommends", "--suggests"} {
			if got, want := lines(q, built[0]), lines(q, ref); got != want {
				t.Errorf("%s %s: spec\n%s\nnfpm\n%s", name, q, got, want)
			}
		}
		if v := strings.TrimSpace(run(t, "rpm", "-qp", "--qf", "%{VERSION}", built[0])); v != strings.TrimSpace(run(t, filepath.Join(repo, "packaging/version.sh"), "--package", d.version)) {
			t.Errorf("%s: rpm version %s for rdmad %s", name, v, d.version)
		}
	}
}

// debFiles lists a .deb's non-directory entries as "mode owner path".
func debFiles(t *testing.T, deb string) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(run(t, "dpkg-deb", "-c", deb)), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || strings.HasPrefix(f[0], "d") {
			continue
		}
		lines = append(lines, f[0]+" "+f[1]+" "+strings.Join(f[5:], " "))
	}
	sort.Strings(lines)
	return lines
}

// TestDistDeb: dpkg-buildpackage -b -d -us -uc in the unpacked tarball
// (plain dh, vendored modules, the Go of /usr/local/go where the
// distribution's is too old) builds rdmad and cockpit-rdmad with the files,
// conffiles, maintainer scripts and relations of the nfpm packages.
func TestDistDeb(t *testing.T) {
	requireTool(t, "dpkg-buildpackage")
	requireTool(t, "dh")
	d := getDist(t)
	nfpm := build(t, version1)
	tree := copyTree(t, d)
	cmd := exec.Command("dpkg-buildpackage", "-b", "-d", "-us", "-uc")
	cmd.Dir = tree
	// debian/rules keeps Go's build cache in the tree, for a build user
	// without a home; here the user's cache takes its place (a variable
	// in MAKEFLAGS overrides the makefile's), as offlineEnv says why.
	cmd.Env = append(offlineEnv(t), "MAKEFLAGS=GOCACHE="+goCache(t))
	if _, err := os.Stat("/usr/local/go/bin/go"); err == nil {
		for i, e := range cmd.Env {
			if strings.HasPrefix(e, "PATH=") {
				cmd.Env[i] = "PATH=/usr/local/go/bin:" + strings.TrimPrefix(e, "PATH=")
			}
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dpkg-buildpackage: %v\n%s", err, out)
	}
	for _, name := range []string{"rdmad", "cockpit-rdmad"} {
		built, _ := filepath.Glob(filepath.Join(filepath.Dir(tree), name+"_*.deb"))
		if len(built) != 1 {
			t.Fatalf("dpkg-buildpackage wrote %v for %s", built, name)
		}
		ref := nfpmPackage(t, nfpm, name+"_*.deb")
		if got, want := debFiles(t, built[0]), debFiles(t, ref); !slices.Equal(got, want) {
			t.Errorf("%s: the dh package's files differ from the nfpm package's:\ndh:\n%s\nnfpm:\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		for _, field := range []string{"Depends", "Recommends", "Suggests", "Architecture"} {
			got := run(t, "dpkg-deb", "-f", built[0], field)
			if want := run(t, "dpkg-deb", "-f", ref, field); got != want {
				t.Errorf("%s %s: dh %q, nfpm %q", name, field, got, want)
			}
		}
		a, b := t.TempDir(), t.TempDir()
		run(t, "dpkg-deb", "-e", built[0], a)
		run(t, "dpkg-deb", "-e", ref, b)
		for _, f := range []string{"conffiles", "preinst", "postinst", "prerm", "postrm"} {
			x, errx := os.ReadFile(filepath.Join(a, f))
			y, erry := os.ReadFile(filepath.Join(b, f))
			if (errx == nil) != (erry == nil) || !bytes.Equal(x, y) {
				t.Errorf("%s: control file %s differs between the dh and the nfpm package", name, f)
			}
		}
	}
}

// The CycloneDX 1.5 constraints (bom-1.5.schema.json) the SBOM relies on.
var (
	serialNumber = regexp.MustCompile(`^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-[1-5][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	sha256Hex    = regexp.MustCompile(`^[a-f0-9]{64}$`)
	spdxIDs      = []string{"Apache-2.0", "BSD-2-Clause", "BSD-3-Clause", "MIT", "MPL-2.0", "ISC"}
)

type cdx struct {
	BOMFormat    string `json:"bomFormat"`
	SpecVersion  string `json:"specVersion"`
	SerialNumber string `json:"serialNumber"`
	Version      int    `json:"version"`
	Metadata     struct {
		Timestamp string       `json:"timestamp"`
		Component cdxComponent `json:"component"`
	} `json:"metadata"`
	Components   []cdxComponent `json:"components"`
	Dependencies []struct {
		Ref       string   `json:"ref"`
		DependsOn []string `json:"dependsOn"`
	} `json:"dependencies"`
}

type cdxComponent struct {
	Type     string `json:"type"`
	BOMRef   string `json:"bom-ref"`
	Name     string `json:"name"`
	Version  string `json:"version"`
	Scope    string `json:"scope"`
	PURL     string `json:"purl"`
	Hashes   []struct{ Alg, Content string }
	Licenses []struct {
		License struct{ ID string } `json:"license"`
	} `json:"licenses"`
}

// TestDistSBOM: the SBOM beside the tarball (and in it) names rdmad at its
// version and exactly the vendored modules, each with its package URL,
// hash, licence and whether the binaries link it (required) or only the
// tests use it (optional), and a dependency graph over those components.
// Every vendored module's licence is in packaging/copyright.
func TestDistSBOM(t *testing.T) {
	d := getDist(t)
	data, err := os.ReadFile(d.sbom)
	mustf(t, err, "SBOM")
	inside, err := os.ReadFile(filepath.Join(d.tree, "rdmad.cdx.json"))
	mustf(t, err, "SBOM in the tarball")
	if !bytes.Equal(data, inside) {
		t.Errorf("the SBOM beside the tarball differs from the one inside")
	}
	var bom cdx
	if err := json.Unmarshal(data, &bom); err != nil {
		t.Fatalf("SBOM: %v", err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.SpecVersion != "1.5" || bom.Version != 1 || !serialNumber.MatchString(bom.SerialNumber) {
		t.Errorf("SBOM header: %s %s %d %s", bom.BOMFormat, bom.SpecVersion, bom.Version, bom.SerialNumber)
	}
	self := bom.Metadata.Component
	if self.Name != "rdmad" || self.Version != d.version || self.PURL != "pkg:golang/github.com/rdmad/rdmad@"+d.version || self.Type != "application" {
		t.Errorf("SBOM metadata component: %+v", self)
	}

	modules := map[string]string{} // vendor/modules.txt: path -> version
	mt, err := os.ReadFile(filepath.Join(d.tree, "vendor/modules.txt"))
	mustf(t, err, "modules.txt")
	for _, m := range regexp.MustCompile(`(?m)^# (\S+) (\S+)$`).FindAllStringSubmatch(string(mt), -1) {
		modules[m[1]] = m[2]
	}
	linked := map[string]bool{}
	p := build(t, version1)
	for _, bin := range []string{"usr/sbin/rdmad", "usr/bin/rdmactl"} {
		out := run(t, "go", "version", "-m", filepath.Join(p.stage, bin))
		for _, m := range regexp.MustCompile(`(?m)^\tdep\t(\S+)\t`).FindAllStringSubmatch(out, -1) {
			linked[m[1]] = true
		}
	}
	refs := map[string]bool{self.BOMRef: true}
	licence := map[string]string{}
	for _, c := range bom.Components {
		refs[c.BOMRef] = true
		want, vendored := modules[c.Name]
		switch {
		case !vendored:
			t.Errorf("SBOM component %s is not vendored", c.Name)
		case c.Version != want || c.PURL != "pkg:golang/"+c.Name+"@"+want || c.BOMRef != c.PURL || c.Type != "library":
			t.Errorf("SBOM component %+v, want %s at %s", c, c.Name, want)
		}
		if len(c.Hashes) != 1 || c.Hashes[0].Alg != "SHA-256" || !sha256Hex.MatchString(c.Hashes[0].Content) {
			t.Errorf("SBOM %s hashes %+v", c.Name, c.Hashes)
		}
		if len(c.Licenses) != 1 || !slices.Contains(spdxIDs, c.Licenses[0].License.ID) {
			t.Errorf("SBOM %s licences %+v", c.Name, c.Licenses)
		} else {
			licence[c.Name] = c.Licenses[0].License.ID
		}
		if wantScope := map[bool]string{true: "required", false: "optional"}[linked[c.Name]]; c.Scope != wantScope {
			t.Errorf("SBOM %s scope %q, want %q (linked into the binaries: %v)", c.Name, c.Scope, wantScope, linked[c.Name])
		}
	}
	if len(bom.Components) != len(modules) {
		t.Errorf("SBOM has %d components, vendor/modules.txt %d modules", len(bom.Components), len(modules))
	}
	for m := range linked {
		if _, ok := licence[m]; !ok {
			t.Errorf("the binaries link %s, which the SBOM does not list", m)
		}
	}
	for _, dep := range bom.Dependencies {
		if !refs[dep.Ref] {
			t.Errorf("SBOM dependency of unknown %s", dep.Ref)
		}
		for _, on := range dep.DependsOn {
			if !refs[on] {
				t.Errorf("SBOM: %s depends on unknown %s", dep.Ref, on)
			}
		}
	}
	if len(bom.Dependencies) != len(refs) {
		t.Errorf("SBOM dependencies name %d components of %d", len(bom.Dependencies), len(refs))
	}

	// packaging/copyright (debian/copyright, the packages' copyright) has a
	// paragraph for every vendored module, under the licence of its own
	// licence file.
	src, err := os.ReadFile(filepath.Join(repo, "packaging/copyright"))
	mustf(t, err, "packaging/copyright")
	files := map[string]string{}
	for _, para := range dep5(t, string(src))[1:] {
		short, _, _ := strings.Cut(para["License"], "\n")
		for _, pat := range strings.Fields(para["Files"]) {
			files[pat] = short
		}
	}
	for m, id := range licence {
		if got := files["vendor/"+m+"/*"]; got != id {
			t.Errorf("packaging/copyright: vendor/%s/* is under %q, its licence file says %s (add or fix its Files: paragraph)", m, got, id)
		}
	}
}

// TestDistSameFromAnyClone: two clones of the commit, one made and built
// under umask 022, the other under 002 (Debian's and Fedora's default for
// user-private groups), give the same tarball, byte for byte: the modes
// of the files, of the directories and of what go mod vendor writes are
// normalised, as owners and times are.
func TestDistSameFromAnyClone(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	sums := map[string]string{}
	for _, umask := range []string{"022", "002"} {
		dir := t.TempDir()
		clone := filepath.Join(dir, "rdmad")
		script := `umask ` + umask + ` && git clone --quiet --no-hardlinks "$REPO" "$CLONE" && make -C "$CLONE" --no-print-directory dist DIST="$OUT" >/dev/null && sha256sum "$OUT"/rdmad-*.tar.gz`
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = append(os.Environ(), "REPO="+repo, "CLONE="+clone, "OUT="+filepath.Join(dir, "dist"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("clone and make dist under umask %s: %v\n%s", umask, err, out)
		}
		sum, _, _ := strings.Cut(string(out), " ")
		sums[umask] = sum
		if umask == "002" {
			// The clone's files are group-writable, as that umask makes them.
			if fi, err := os.Stat(filepath.Join(clone, "Makefile")); err != nil || fi.Mode().Perm()&0o020 == 0 {
				t.Fatalf("the clone under umask 002 is not group-writable: %v %v", fi.Mode(), err)
			}
		}
	}
	if sums["022"] != sums["002"] {
		t.Errorf("make dist from a clone under umask 022 gave sha256 %s, under 002 %s", sums["022"], sums["002"])
	}
}
