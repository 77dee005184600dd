package pkgtest

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const spdx = "Apache-2.0"

// TestLicenseFile: LICENSE at the root is the Apache License 2.0, byte for
// byte the text Debian ships where it is installed.
func TestLicenseFile(t *testing.T) {
	got, err := os.ReadFile(filepath.Join(repo, "LICENSE"))
	mustf(t, err, "LICENSE")
	if !bytes.Contains(got, []byte("Apache License\n                           Version 2.0, January 2004")) ||
		!bytes.Contains(got, []byte("END OF TERMS AND CONDITIONS")) {
		t.Errorf("LICENSE is not the Apache License 2.0 text")
	}
	if want, err := os.ReadFile("/usr/share/common-licenses/Apache-2.0"); err == nil && !bytes.Equal(got, want) {
		t.Errorf("LICENSE differs from /usr/share/common-licenses/Apache-2.0")
	}
	meta, err := os.ReadFile(filepath.Join(repo, "contrib/ansible/roles/rdmad/meta/main.yml"))
	mustf(t, err, "role meta")
	if !regexp.MustCompile(`(?m)^  license: ` + regexp.QuoteMeta(spdx) + `$`).Match(meta) {
		t.Errorf("contrib/ansible/roles/rdmad/meta/main.yml: galaxy_info.license is not %s:\n%s", spdx, meta)
	}
}

// TestPackageLicenseAndSuggests: both packages declare Apache-2.0 in their
// metadata, and each suggests its distribution's polkit package.
func TestPackageLicenseAndSuggests(t *testing.T) {
	p := build(t, version1)
	if got := strings.TrimSpace(run(t, "dpkg-deb", "-f", p.deb, "License")); got != spdx {
		t.Errorf("dpkg-deb -f License = %q, want %s", got, spdx)
	}
	if got := strings.TrimSpace(run(t, "dpkg-deb", "-f", p.deb, "Suggests")); !regexp.MustCompile(`(^|, )polkitd(,|$)`).MatchString(got) {
		t.Errorf("deb Suggests %q, want polkitd (Debian's name)", got)
	}
	rpmBin := requireTool(t, "rpm")
	if got := run(t, rpmBin, "-qp", "--qf", "%{LICENSE}", p.rpm); got != spdx {
		t.Errorf("rpm -qp --qf %%{LICENSE} = %q, want %s", got, spdx)
	}
	sugg := strings.Fields(run(t, rpmBin, "-qp", "--suggests", p.rpm))
	sort.Strings(sugg)
	if i := sort.SearchStrings(sugg, "polkit"); i == len(sugg) || sugg[i] != "polkit" {
		t.Errorf("rpm -qp --suggests = %v, want polkit (Fedora/RHEL's name)", sugg)
	}
	for _, s := range sugg {
		if s == "polkitd" {
			t.Errorf("rpm suggests polkitd, a name no RHEL-family repository has")
		}
	}
}

// dep5 parses a machine-readable copyright file (DEP-5: deb822 paragraphs,
// continuation lines start with a space, " ." an empty line). It fails on
// anything that is not a field or a continuation.
func dep5(t *testing.T, text string) []map[string]string {
	t.Helper()
	var paras []map[string]string
	var cur map[string]string
	var last string
	for n, line := range strings.Split(text, "\n") {
		switch {
		case strings.TrimSpace(line) == "":
			cur, last = nil, ""
		case line[0] == ' ' || line[0] == '\t':
			if cur == nil || last == "" {
				t.Fatalf("copyright:%d: continuation line outside a field", n+1)
			}
			cur[last] += "\n" + strings.TrimSpace(line)
		default:
			name, value, ok := strings.Cut(line, ":")
			if !ok || strings.ContainsAny(name, " \t") {
				t.Fatalf("copyright:%d: not a field: %q", n+1, line)
			}
			if cur == nil {
				cur = map[string]string{}
				paras = append(paras, cur)
			}
			if _, dup := cur[name]; dup {
				t.Fatalf("copyright:%d: field %s twice in a paragraph", n+1, name)
			}
			cur[name], last = strings.TrimSpace(value), name
		}
	}
	return paras
}

// TestCopyrightDEP5: the shipped copyright file is DEP-5 with rdmad under
// Apache-2.0, every licence short name used has its text, and every Go
// module linked into the packaged binaries has a Files paragraph (as
// `go mod vendor` would place it) naming its licence.
func TestCopyrightDEP5(t *testing.T) {
	p := build(t, version1)
	shipped, err := os.ReadFile(filepath.Join(p.stage, "usr/share/doc/rdmad/copyright"))
	mustf(t, err, "staged copyright")
	src, err := os.ReadFile(filepath.Join(repo, "packaging/copyright"))
	mustf(t, err, "packaging/copyright")
	if !bytes.Equal(shipped, src) {
		t.Errorf("the package's copyright differs from packaging/copyright")
	}
	paras := dep5(t, string(src))
	if len(paras) == 0 || paras[0]["Format"] != "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/" {
		t.Fatalf("copyright: header paragraph lacks the DEP-5 Format field")
	}
	files := map[string]string{} // pattern -> licence short name
	texts := map[string]bool{}
	for i, para := range paras[1:] {
		lic, hasLic := para["License"]
		short, text, _ := strings.Cut(lic, "\n")
		switch {
		case para["Files"] != "":
			if para["Copyright"] == "" || !hasLic {
				t.Errorf("copyright: Files paragraph %d (%s) lacks Copyright or License", i+1, para["Files"])
			}
			for _, pat := range strings.Fields(para["Files"]) {
				files[pat] = short
			}
			if text != "" {
				texts[short] = true
			}
		case hasLic && text != "":
			texts[short] = true
		default:
			t.Errorf("copyright: paragraph %d is neither Files nor a standalone License: %v", i+1, para)
		}
	}
	if files["*"] != spdx {
		t.Errorf("copyright: Files: * is under %q, want %s", files["*"], spdx)
	}
	for pat, short := range files {
		if !texts[short] {
			t.Errorf("copyright: %s is under %q, whose text is nowhere in the file", pat, short)
		}
	}
	for _, bin := range []string{"usr/sbin/rdmad", "usr/bin/rdmactl"} {
		out := run(t, "go", "version", "-m", filepath.Join(p.stage, bin))
		for _, m := range regexp.MustCompile(`(?m)^\tdep\t(\S+)\t`).FindAllStringSubmatch(out, -1) {
			if files["vendor/"+m[1]+"/*"] == "" {
				t.Errorf("%s links %s, which packaging/copyright does not name (add a Files: vendor/%s/* paragraph with its licence)", bin, m[1], m[1])
			}
		}
	}
	if bytes.Contains(src, []byte("none-declared")) {
		t.Errorf("copyright still says none-declared")
	}
}
