package pkgtest

import (
	"regexp"
	"strings"
	"testing"
)

// rpmScriptlets splits `rpm -qp --scripts` into scriptlet name -> body.
func rpmScriptlets(t *testing.T, rpm string) map[string]string {
	t.Helper()
	out := run(t, requireTool(t, "rpm"), "-qp", "--scripts", rpm)
	head := regexp.MustCompile(`(?m)^(\w+) scriptlet \(using /bin/sh\):$`)
	got := map[string]string{}
	idx := head.FindAllStringSubmatchIndex(out, -1)
	for i, m := range idx {
		end := len(out)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		got[out[m[2]:m[3]]] = out[m[1]:end]
	}
	return got
}

// TestRPMScriptlets checks that the .rpm carries, written out, what the RHEL
// macros %systemd_post, %systemd_preun, %systemd_postun_with_restart,
// %sysusers_create_compat and %tmpfiles_create expand to, keyed on the
// scriptlet argument as rpm passes it (install 1, upgrade 2, erase 0).
func TestRPMScriptlets(t *testing.T) {
	p := build(t, version1)
	s := rpmScriptlets(t, p.rpm)
	want := map[string][]string{
		"postinstall": {
			`systemd-sysusers rdmad\.conf`,
			`systemd-tmpfiles --create rdmad\.conf`,
			`if \[ "\$1" -eq 1 \]; then(?s:.*)systemd-update-helper install-system-units rdmad\.service`,
			`systemctl --no-reload preset rdmad\.service`,
			`systemctl daemon-reload`,
		},
		"preuninstall": {
			`if \[ "\$1" -eq 0 \]; then(?s:.*)systemd-update-helper remove-system-units rdmad\.service`,
			`systemctl --no-reload disable --now rdmad\.service`,
		},
		"postuninstall": {
			`systemctl daemon-reload`,
			`if \[ "\$1" -ge 1 \]; then(?s:.*)systemd-update-helper mark-restart-system-units rdmad\.service`,
			`systemctl try-restart rdmad\.service`,
			`if \[ "\$1" -eq 0 \]; then(?s:.*)head -c 24 "\$f"\)" = '# rdmad textfile metrics' \](?s:.*)rm -f "\$f"`,
		},
	}
	for name, res := range want {
		body, ok := s[name]
		if !ok {
			t.Errorf("no %s scriptlet; have %v", name, keys(s))
			continue
		}
		for _, re := range res {
			if !regexp.MustCompile(re).MatchString(body) {
				t.Errorf("%s scriptlet lacks %s:\n%s", name, re, body)
			}
		}
	}
	// No scriptlet may fail the transaction on a host without systemd
	// running: every systemd call ends in `|| :`.
	for name, body := range s {
		for _, line := range strings.Split(body, "\n") {
			line = strings.TrimSpace(line)
			if regexp.MustCompile(`^(/usr/lib/systemd/\S+|systemctl|systemd-\w+|udevadm) `).MatchString(line) && !strings.HasSuffix(line, "|| :") {
				t.Errorf("%s: %q can fail the rpm transaction (no || :)", name, line)
			}
		}
	}
}

// rpmPath is where the .rpm puts a file the .deb has elsewhere: zsh reads
// vendor completions from vendor-completions on Debian, from
// site-functions on Fedora and RHEL.
var rpmPath = map[string]string{"/usr/share/zsh/vendor-completions/_rdmactl": "/usr/share/zsh/site-functions/_rdmactl"}

// TestRPMFiles: the conffile is %config(noreplace), rdmad's state file is
// %ghost, the files rdmad writes under /etc are not the package's, and the
// rpm ships the same files as the .deb.
func TestRPMFiles(t *testing.T) {
	p := build(t, version1)
	out := run(t, requireTool(t, "rpm"), "-qp", "--qf", `[%{FILENAMES}\t%{FILEFLAGS:fflags}\t%{FILEMODES:perms}\n]`, p.rpm)
	rpmFiles := map[string][2]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			t.Fatalf("rpm file line %q", line)
		}
		rpmFiles[f[0]] = [2]string{f[1], f[2]}
	}
	if got := rpmFiles["/etc/rdma/rdmad.toml"][0]; got != "cn" {
		t.Errorf("/etc/rdma/rdmad.toml flags %q, want cn (%%config(noreplace))", got)
	}
	for _, state := range []string{"/var/lib/rdmad/last-good-config.json", "/var/lib/rdmad/found.json"} {
		if got := rpmFiles[state][0]; got != "g" {
			t.Errorf("%s flags %q, want g (%%ghost)", state, got)
		}
	}
	// Files rdmad writes under /etc are not the package's: rpm -e would
	// remove a %ghost whatever it holds, an administrator's file included;
	// %postun removes them only when they carry rdmad's header.
	for _, f := range []string{"/etc/rdma/rdmad.d/zz-rdmad-persist.toml", "/etc/rdma/rdmad.d/00-upgrade-memlock.toml",
		"/etc/security/limits.d/90-rdmad-memlock.conf", "/etc/systemd/system.conf.d/90-rdmad-memlock.conf",
		"/etc/modprobe.d/rdmad-netns.conf", "/etc/modprobe.d/rdmad-mlx4-pfc.conf"} {
		if _, ok := rpmFiles[f]; ok {
			t.Errorf("%s is in the .rpm (flags %q): rpm -e would remove it even when an administrator wrote it", f, rpmFiles[f][0])
		}
	}
	if got := rpmFiles["/etc/rdma/rdmad.d"][1]; got != "drwxr-xr-x" {
		t.Errorf("/etc/rdma/rdmad.d mode %q", got)
	}
	deb := debContents(t, p.deb)
	for name, e := range deb {
		if e.mode[0] == 'd' || debOnly[name] || name == "/usr/share/doc/rdmad/changelog.gz" {
			continue
		}
		rname := name
		if alt, ok := rpmPath[name]; ok {
			rname = alt
		}
		r, ok := rpmFiles[rname]
		if !ok {
			t.Errorf("%s is in the .deb, not in the .rpm", name)
		} else if r[1] != e.mode {
			t.Errorf("%s: mode %s in the .rpm, %s in the .deb", name, r[1], e.mode)
		}
	}
	reqs := run(t, "rpm", "-qp", "--requires", p.rpm)
	for _, dep := range []string{"systemd", "dbus"} {
		if !regexp.MustCompile(`(?m)^` + dep + `$`).MatchString(reqs) {
			t.Errorf("rpm does not require %s:\n%s", dep, reqs)
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
