package doctor

import (
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/host"
)

// RDMA pins every buffer it registers, counted against RLIMIT_MEMLOCK. The
// guides set it unlimited for the rdma group (limits.conf) and systemd
// services ignore limits.conf, so doctor works out both limits from the
// files, as pam_limits and systemd would, and judges them against the
// declared [memlock]; without one, a limit nobody chose (the default) is a
// warning, and a value an administrator wrote is respected.

// Kernel and systemd defaults of RLIMIT_MEMLOCK.
const (
	kib              = 1024
	mib              = 1024 * kib
	gib              = 1024 * mib
	oldKernelMemlock = 64 * kib // before Linux 5.16
	newMemlock       = 8 * mib  // Linux >= 5.16 (commit 9dcc38e2813e), and systemd >= 253 on any kernel
)

var unlimited = config.Limit{Unlimited: true}

// limitLess reports a < b.
func limitLess(a, b config.Limit) bool {
	switch {
	case a.Unlimited:
		return false
	case b.Unlimited:
		return true
	}
	return a.Bytes < b.Bytes
}

// formatLimit prints a limit for a human: "unlimited", "8 MiB", "12345 bytes".
func formatLimit(l config.Limit) string {
	if l.Unlimited {
		return "unlimited"
	}
	for _, u := range []struct {
		n    uint64
		name string
	}{{1 << 40, "TiB"}, {gib, "GiB"}, {mib, "MiB"}, {kib, "KiB"}} {
		if l.Bytes >= u.n && l.Bytes%u.n == 0 {
			return fmt.Sprintf("%d %s", l.Bytes/u.n, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", l.Bytes)
}

// sourcedLimit is a limit and where it comes from; explicit is false for a
// built-in default.
type sourcedLimit struct {
	soft, hard config.Limit
	source     string // for the operator: "LimitMEMLOCK=… at /file:line"
	file       string // the file that sets it ("/etc/…"), "" for a default
	explicit   bool
	note       string // something the operator should know about the value
}

const (
	memlockFixDeclare  = `declare [memlock] in /etc/rdma/rdmad.toml (group = "rdma", soft = "unlimited", hard = "unlimited", services = true)`
	systemdMainFile    = "etc/systemd/system.conf"
	rdmadLimitsFile    = "/etc/security/limits.d/90-rdmad-memlock.conf"
	rdmadSystemdDropIn = "/etc/systemd/system.conf.d/90-rdmad-memlock.conf"
)

func (d *diag) checkMemlock() {
	m := d.pol.Memlock
	services := d.servicesMemlock()
	d.checkLoginMemlock(m, services)
	d.checkServicesMemlock(m, services)
	d.checkContainerMemlock(m, services)
	d.checkJobServiceMemlock(m, services)
}

// --- systemd ---

// servicesMemlock is DefaultLimitMEMLOCK= as systemd reads it: the first
// system.conf found, then system.conf.d drop-ins by file name, the last
// assignment winning; unset, the built-in default.
func (d *diag) servicesMemlock() sourcedLimit {
	files := []string{}
	for _, main := range []string{systemdMainFile, "run/systemd/system.conf", "usr/local/lib/systemd/system.conf", "usr/lib/systemd/system.conf"} {
		if exists(d.h, main) {
			files = append(files, main)
			break
		}
	}
	files = append(files, d.h.DropIns(".conf",
		"etc/systemd/system.conf.d", "run/systemd/system.conf.d", "usr/local/lib/systemd/system.conf.d",
		"usr/lib/systemd/system.conf.d", "lib/systemd/system.conf.d")...)
	res := d.builtinMemlock()
	for _, f := range files {
		iniAssignments(d.h, f, "Manager", "DefaultLimitMEMLOCK", func(value string, line int) {
			if value == "" {
				res = d.builtinMemlock()
				return
			}
			soft, hard, err := parseSystemdLimit(value)
			if err != nil {
				return // systemd ignores an invalid assignment too
			}
			res = sourcedLimit{soft: soft, hard: hard, explicit: true, file: "/" + f, source: fmt.Sprintf("DefaultLimitMEMLOCK=%s at /%s:%d", value, f, line)}
		})
	}
	return res
}

// builtinMemlock is what services get with DefaultLimitMEMLOCK unset:
// 8 MiB from systemd 253 on, else the kernel's (8 MiB from 5.16, 64 KiB
// before). Unknown versions count as current.
func (d *diag) builtinMemlock() sourcedLimit {
	l := config.Limit{Bytes: newMemlock}
	why := "the default of systemd and of Linux 5.16+"
	if major, minor, ok := d.kernelVersion(); ok && (major < 5 || (major == 5 && minor < 16)) {
		if v := d.systemdVersion(); v == 0 || v < 253 {
			l, why = config.Limit{Bytes: oldKernelMemlock}, "the kernel's default before Linux 5.16"
		}
	}
	return sourcedLimit{soft: l, hard: l, source: why}
}

func (d *diag) kernelVersion() (major, minor int, ok bool) {
	rel := readAttr(d.h, "proc/sys/kernel/osrelease")
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return major, minor, err1 == nil && err2 == nil
}

// systemdVersion reads the version off libsystemd-shared-NNN.so, which
// every systemd install has beside its binaries; 0 when not found.
func (d *diag) systemdVersion() int {
	dirs := []string{"usr/lib/systemd", "usr/lib64/systemd", "lib/systemd"}
	if names, err := boundedDir(d.h, "usr/lib"); err == nil {
		for _, n := range names {
			if strings.Contains(n, "-linux-") {
				dirs = append(dirs, path.Join("usr/lib", n, "systemd"))
			}
		}
	}
	for _, dir := range dirs {
		names, err := boundedDir(d.h, dir)
		if err != nil {
			continue
		}
		for _, n := range names {
			if rest, ok := strings.CutPrefix(n, "libsystemd-shared-"); ok {
				end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
				if end < 0 {
					end = len(rest)
				}
				if v, err := strconv.Atoi(rest[:end]); err == nil {
					return v
				}
			}
		}
	}
	return 0
}

// iniAssignments calls fn for every "key=value" of key in [section] of a
// systemd-style INI file, in order.
func iniAssignments(h *host.Host, rel, section, key string, fn func(value string, line int)) {
	cur, n := "", 0
	_ = boundedLines(h, rel, capConfig, func(line string) bool {
		n++
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && strings.HasSuffix(line, "]"):
			cur = line[1 : len(line)-1]
		case cur == section:
			if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == key {
				fn(strings.TrimSpace(v), n)
			}
		}
		return true
	})
}

// parseSystemdLimit reads LimitMEMLOCK= / DefaultLimitMEMLOCK= values:
// "infinity", a size with an optional K/M/G/T/P/E suffix (base 1024), or
// "soft:hard".
func parseSystemdLimit(v string) (soft, hard config.Limit, err error) {
	s, h, two := strings.Cut(v, ":")
	if soft, err = parseSystemdSize(s); err != nil {
		return soft, hard, err
	}
	if !two {
		return soft, soft, nil
	}
	hard, err = parseSystemdSize(h)
	return soft, hard, err
}

func parseSystemdSize(v string) (config.Limit, error) {
	v = strings.TrimSpace(v)
	if v == "infinity" {
		return unlimited, nil
	}
	num := strings.TrimRightFunc(v, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	suffix := strings.TrimSpace(v[len(num):])
	mult := map[string]float64{"": 1, "B": 1, "K": kib, "M": mib, "G": gib, "T": 1 << 40, "P": 1 << 50, "E": 1 << 60}[suffix]
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || mult == 0 || f < 0 {
		return config.Limit{}, fmt.Errorf("invalid size %q", v)
	}
	return config.Limit{Bytes: uint64(f * mult)}, nil
}

func (d *diag) checkServicesMemlock(m *config.Memlock, services sourcedLimit) {
	got := fmt.Sprintf("systemd services get memlock %s (%s)", formatLimit(services.soft), services.source)
	switch {
	case m != nil && !m.Services:
		d.ok("memlock-services", hostSubject, got+"; [memlock] services = false leaves them alone")
	case m != nil && limitLess(services.soft, m.Soft):
		fix := "rdmactl status (rdmad writes " + rdmadSystemdDropIn + ")"
		if services.explicit && services.file != rdmadSystemdDropIn {
			fix = "remove DefaultLimitMEMLOCK= from the file named (it is read after " + rdmadSystemdDropIn + "), then systemctl daemon-reexec"
		}
		d.fail("memlock-services-low", hostSubject, got+", below the declared "+formatLimit(m.Soft), fix)
	case m == nil && !services.explicit && !services.soft.Unlimited:
		d.warn("memlock-services-low", hostSubject,
			got+": an RDMA service cannot register more memory than that",
			memlockFixDeclare)
	default:
		d.ok("memlock-services", hostSubject, got)
	}
}

// --- login sessions (pam_limits) ---

// limitsEntry is one memlock line of limits.conf or limits.d.
type limitsEntry struct {
	domain, typ, value string
	noLimits           bool   // "<domain> -": pam_limits sets no limits at all for a match
	file               string // "/etc/security/…"
	where              string // file:line, for the operator
}

// limitsEntries reads the memlock entries in the order pam_limits reads
// its files: limits.conf, then limits.d/*.conf by file name.
func (d *diag) limitsEntries() []limitsEntry {
	files := []string{}
	if exists(d.h, "etc/security/limits.conf") {
		files = append(files, "etc/security/limits.conf")
	} else if exists(d.h, "usr/etc/security/limits.conf") {
		files = append(files, "usr/etc/security/limits.conf")
	}
	files = append(files, d.h.DropIns(".conf", "etc/security/limits.d", "usr/etc/security/limits.d")...)
	var out []limitsEntry
	for _, f := range files {
		n := 0
		_ = boundedLines(d.h, f, capConfig, func(line string) bool {
			n++
			if i := strings.IndexByte(line, '#'); i >= 0 {
				line = line[:i]
			}
			fl := strings.Fields(line)
			file := "/" + f
			where := fmt.Sprintf("%s:%d", file, n)
			switch {
			case len(fl) == 2 && fl[1] == "-":
				out = append(out, limitsEntry{domain: fl[0], noLimits: true, file: file, where: where})
			case len(fl) >= 4 && strings.ToLower(fl[2]) == "memlock":
				out = append(out, limitsEntry{domain: fl[0], typ: strings.ToLower(fl[1]), value: strings.ToLower(strings.Join(fl[3:], " ")), file: file, where: where})
			}
			return true
		})
	}
	return out
}

// loginMemlock is what pam_limits gives user (a member of groups) at login:
// a user entry beats an @group entry beats "*", a later entry of the same
// rank wins; "<domain> -" ends the reading with no limits set. What no
// entry sets is inherited from the login service, i.e. services' default.
func loginMemlock(entries []limitsEntry, user string, groups map[string]bool, inherited sourcedLimit) sourcedLimit {
	const none = 9
	res := inherited
	softRank, hardRank := none, none
	for _, e := range entries {
		rank := none
		switch {
		case user != "" && e.domain == user:
			rank = 0
		case strings.HasPrefix(e.domain, "@") && groups[e.domain[1:]]:
			rank = 1
		case e.domain == "*" && !e.noLimits:
			rank = 4
		}
		if rank == none {
			continue // other users and groups, uid/gid ranges, %group (maxlogins only)
		}
		if e.noLimits {
			inherited.note = e.where + ` ("` + e.domain + ` -") turns pam_limits off for them`
			return inherited
		}
		val, note, ok := parseLimitsValue(e.value)
		if !ok {
			continue // pam_limits skips it with a warning
		}
		if note != "" {
			note = e.where + ": " + note
		}
		if (e.typ == "soft" || e.typ == "-") && rank <= softRank {
			res.soft, softRank = val, rank
			res.explicit, res.source, res.file, res.note = true, e.where, e.file, note
		}
		if (e.typ == "hard" || e.typ == "-") && rank <= hardRank {
			res.hard, hardRank = val, rank
		}
	}
	return res
}

// parseLimitsValue reads a limits.conf memlock value (KiB, or unlimited)
// as pam_limits does: leading digits count and anything after them is
// ignored, which turns "64G" into 64 KiB; note says so.
func parseLimitsValue(v string) (l config.Limit, note string, ok bool) {
	switch v {
	case "unlimited", "infinity", "-1", "-":
		return unlimited, "", true
	}
	end := strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(v)
	}
	if end == 0 {
		return config.Limit{}, "", false
	}
	n, err := strconv.ParseUint(v[:end], 10, 64)
	if err != nil {
		return config.Limit{}, "", false
	}
	if end < len(v) {
		note = fmt.Sprintf("%q is read as %s KiB (limits.conf takes KiB, no unit)", v, v[:end])
	}
	return config.Limit{Bytes: n * kib}, note, true
}

// groupMembers reads /etc/group: the members listed for name, and whether
// the group exists; ok is false when the file cannot be read.
func (d *diag) groupFile() (groups map[string][]string, ok bool) {
	groups = map[string][]string{}
	err := boundedLines(d.h, "etc/group", capConfig, func(line string) bool {
		f := strings.Split(line, ":")
		if len(f) < 4 || f[0] == "" {
			return true
		}
		var members []string
		for _, m := range strings.Split(f[3], ",") {
			if m = strings.TrimSpace(m); m != "" {
				members = append(members, m)
			}
		}
		groups[f[0]] = members
		return true
	})
	return groups, err == nil
}

func (d *diag) checkLoginMemlock(m *config.Memlock, services sourcedLimit) {
	group := config.DefaultMemlockGroup
	if m != nil {
		group = m.Group
	}
	groups, groupsKnown := d.groupFile()
	members, groupExists := groups[group]
	if m != nil && groupsKnown && !groupExists {
		d.fail("memlock-group-missing", hostSubject,
			fmt.Sprintf("group %s of [memlock] is not in /etc/group: its memlock limits apply to nobody", group),
			fmt.Sprintf("groupadd --system %s; then add RDMA users: usermod -aG %s USER", group, group))
	}
	entries := d.limitsEntries()
	member := loginMemlock(entries, "", map[string]bool{group: true}, services)
	who := "members of group " + group
	if !groupExists && m == nil {
		who = "RDMA users"
	}
	got := fmt.Sprintf("%s get memlock %s at login (%s)", who, formatLimit(member.soft), member.source)
	if member.note != "" {
		got += "; " + member.note
	}
	switch {
	case m != nil && limitLess(member.soft, m.Soft):
		fix := "rdmactl status (rdmad writes " + rdmadLimitsFile + ")"
		if member.explicit && member.file != rdmadLimitsFile {
			fix = "remove the memlock entry at " + member.source + ": pam_limits ranks it above rdmad's"
		}
		d.fail("memlock-login-low", hostSubject, got+", below the declared "+formatLimit(m.Soft), fix)
		return
	case m == nil && !member.explicit && !member.soft.Unlimited:
		d.warn("memlock-login-low", hostSubject, got+": RDMA programs cannot register more memory than that", memlockFixDeclare)
		return
	}
	// The group is right; a member can still be held down by an entry of
	// their own, or of another group they are in.
	need := member.soft
	if m != nil {
		need = m.Soft
	}
	for _, u := range members {
		theirs := map[string]bool{}
		for g, ms := range groups {
			for _, x := range ms {
				if x == u {
					theirs[g] = true
				}
			}
		}
		theirs[group] = true
		lim := loginMemlock(entries, u, theirs, services)
		if limitLess(lim.soft, need) {
			d.fail("memlock-login-low", hostSubject,
				fmt.Sprintf("user %s (in group %s) gets memlock %s at login (%s), below %s", u, group, formatLimit(lim.soft), lim.source, formatLimit(need)),
				"remove or raise the memlock entry at "+lim.source)
			return
		}
	}
	d.ok("memlock-login", hostSubject, got+"; members log in again to get a changed limit")
}

// --- container runtimes ---

// containerRuntimes are the services whose limits their containers
// inherit (runc keeps the runtime's RLIMIT_MEMLOCK unless told otherwise).
var containerRuntimes = []string{"containerd.service", "docker.service", "crio.service"}

var unitDirs = []string{"etc/systemd/system", "run/systemd/system", "usr/local/lib/systemd/system", "usr/lib/systemd/system", "lib/systemd/system"}

// unitFile is the file of unit that systemd loads (the first of unitDirs
// that has it), relative to the root; "" when it is not installed or the
// first one is a mask.
func unitFile(h *host.Host, unit string) string {
	for _, dir := range unitDirs {
		p := path.Join(dir, unit)
		if masked(h, p) {
			return ""
		}
		if exists(h, p) {
			return p
		}
	}
	return ""
}

// unitMemlock is a unit's LimitMEMLOCK= after its drop-ins; found is false
// when the unit is not installed or is masked.
func (d *diag) unitMemlock(unit string, services sourcedLimit) (lim sourcedLimit, found bool) {
	file := unitFile(d.h, unit)
	if file == "" {
		return lim, false
	}
	// The unit's own drop-ins, then those of every service (service.d,
	// systemd 246 on): systemd reads them together, by file name.
	var dropDirs []string
	for _, dir := range unitDirs {
		dropDirs = append(dropDirs, path.Join(dir, unit+".d"))
	}
	if strings.HasSuffix(unit, ".service") {
		for _, dir := range unitDirs {
			dropDirs = append(dropDirs, path.Join(dir, "service.d"))
		}
	}
	lim = services
	for _, f := range append([]string{file}, d.h.DropIns(".conf", dropDirs...)...) {
		iniAssignments(d.h, f, "Service", "LimitMEMLOCK", func(value string, line int) {
			if value == "" {
				lim = services
				return
			}
			if soft, hard, err := parseSystemdLimit(value); err == nil {
				lim = sourcedLimit{soft: soft, hard: hard, explicit: true, file: "/" + f, source: fmt.Sprintf("LimitMEMLOCK=%s at /%s:%d", value, f, line)}
			}
		})
	}
	return lim, true
}

// dockerDefaultUlimit reads "default-ulimits": {"memlock": {...}} of
// /etc/docker/daemon.json, which docker applies to every container.
func (d *diag) dockerDefaultUlimit() (sourcedLimit, bool) {
	b, err := boundedRead(d.h, "etc/docker/daemon.json", capConfig)
	if err != nil {
		return sourcedLimit{}, false
	}
	var cfg struct {
		DefaultUlimits map[string]struct {
			Soft, Hard int64
		} `json:"default-ulimits"`
	}
	if json.Unmarshal(b, &cfg) != nil {
		return sourcedLimit{}, false
	}
	u, ok := cfg.DefaultUlimits["memlock"]
	if !ok {
		return sourcedLimit{}, false
	}
	conv := func(v int64) config.Limit {
		if v < 0 {
			return unlimited
		}
		return config.Limit{Bytes: uint64(v)}
	}
	return sourcedLimit{soft: conv(u.Soft), hard: conv(u.Hard), explicit: true, file: "/etc/docker/daemon.json", source: "default-ulimits in /etc/docker/daemon.json"}, true
}

func (d *diag) checkContainerMemlock(m *config.Memlock, services sourcedLimit) {
	for _, unit := range containerRuntimes {
		lim, found := d.unitMemlock(unit, services)
		if !found {
			continue
		}
		if unit == "docker.service" {
			if u, ok := d.dockerDefaultUlimit(); ok {
				lim = u
			}
		}
		name := strings.TrimSuffix(unit, ".service")
		got := fmt.Sprintf("containers of %s get memlock %s (%s)", name, formatLimit(lim.soft), lim.source)
		low := false
		switch {
		case m != nil:
			low = limitLess(lim.soft, m.Soft)
		default:
			low = !lim.explicit && !lim.soft.Unlimited
		}
		if !low {
			d.ok("memlock-container", hostSubject, got)
			continue
		}
		want := "infinity"
		if m != nil {
			want = m.Soft.Systemd()
		}
		d.warn("memlock-container-low", hostSubject, got+": RDMA in containers cannot register more memory than that",
			fmt.Sprintf("drop-in /etc/systemd/system/%s.d/memlock.conf with [Service] LimitMEMLOCK=%s, then systemctl daemon-reload; systemctl restart %s", unit, want, name))
	}
}
