package config

// What the site declares about its own health gate: [[expect]] (what each
// port should be), [doctor] (findings to ignore, error-counter sampling
// and thresholds) and [memlock] check_units. None of it changes the host:
// doctor judges the host against it.

import (
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ExpectState is the state an [[expect]] rule declares for a port.
type ExpectState string

const (
	// ExpectUp: ACTIVE with its physical link up (and, on InfiniBand and
	// Omni-Path, configured by a subnet manager).
	ExpectUp ExpectState = "up"
	// ExpectDown: unused by design; doctor judges nothing about the port.
	ExpectDown ExpectState = "down"
)

// PCIeLink is a PCI Express link: speed in GT/s and width in lanes.
type PCIeLink struct {
	GTs   float64 // 2.5, 5, 8, 16, 32, 64
	Lanes int     // 1, 2, 4, 8, 16, 32
}

// String is the link as the files write it: "16.0 GT/s x16".
func (l PCIeLink) String() string {
	return strconv.FormatFloat(l.GTs, 'f', 1, 64) + " GT/s x" + strconv.Itoa(l.Lanes)
}

// Below reports whether l is slower or narrower than o.
func (l PCIeLink) Below(o PCIeLink) bool { return l.GTs < o.GTs || l.Lanes < o.Lanes }

// ExpectRule is one [[expect]] entry: what doctor judges the selected
// ports against. Every field but the selector is optional.
type ExpectRule struct {
	Source Position
	Selector
	Port  int         // 0: every port of the device
	State ExpectState // "": not declared by this rule
	// Rate is the least rate in Gb/s (as sysfs ports/N/rate says it);
	// 0: not declared.
	Rate float64
	// Width is the least link width in lanes ("4X" is 4); 0: not declared.
	Width int
	// PCIe is the least link of the device's PCI function; nil: not
	// declared.
	PCIe *PCIeLink
	// Count is how many devices (ports, with Port) at least match the
	// selector; 0: not declared.
	Count int
}

// Exact reports whether the rule names one device: by exact name, node
// GUID or a PCI address without glob characters. Such a rule that matches
// nothing fails (a device gone, a PCIe link that did not train); a glob or
// driver rule without count may rightly match nothing on a host of a
// fleet.
func (r ExpectRule) Exact() bool {
	return (!r.Device.Empty() && !r.Device.Pattern) || r.GUID != "" ||
		(r.PCI != "" && !strings.ContainsAny(r.PCI, "*?["))
}

// Expectation is what the [[expect]] rules declare for one port: each
// field resolved on its own, the last rule that sets it winning.
type Expectation struct {
	State       ExpectState
	StateSource Position
	Rate        float64
	RateSource  Position
	Width       int
	WidthSource Position
	PCIe        *PCIeLink
	PCIeSource  Position
}

// RequiresPresence reports whether the rule fails when it matches fewer
// devices (or ports) than it expects: it declares a count, or it names one
// device and expects more of it than an unused port (state = "down" alone
// needs no device: the port is unused by design).
func (r ExpectRule) RequiresPresence() bool {
	if r.Count > 0 {
		return true
	}
	downOnly := r.State == ExpectDown && r.Rate == 0 && r.Width == 0 && r.PCIe == nil
	return r.Exact() && !downOnly
}

// Least is how many devices (ports, with Port) the rule needs: its count,
// else one for a rule that requires presence.
func (r ExpectRule) Least() int {
	if r.Count > 0 {
		return r.Count
	}
	if r.RequiresPresence() {
		return 1
	}
	return 0
}

// Empty reports whether no rule declares anything for the port.
func (e Expectation) Empty() bool {
	return e.State == "" && e.Rate == 0 && e.Width == 0 && e.PCIe == nil
}

// ExpectFor resolves the [[expect]] rules for one port.
func (p *Policy) ExpectFor(t Target, port int) Expectation {
	var e Expectation
	for _, r := range p.Expect {
		if (r.Port != 0 && r.Port != port) || !r.Selector.Matches(t) {
			continue
		}
		if r.State != "" {
			e.State, e.StateSource = r.State, r.Source
		}
		if r.Rate != 0 {
			e.Rate, e.RateSource = r.Rate, r.Source
		}
		if r.Width != 0 {
			e.Width, e.WidthSource = r.Width, r.Source
		}
		if r.PCIe != nil {
			l := *r.PCIe
			e.PCIe, e.PCIeSource = &l, r.Source
		}
	}
	return e
}

// Doctor is the [doctor] table.
type Doctor struct {
	// Ignore lists the findings shown as "ignored", in declaration order
	// across the files.
	Ignore   []IgnoreRule
	Counters CounterPolicy
}

// IgnoreRule is one entry of [doctor] ignore: "ID" or "ID:SUBJECT", each
// part a glob in which "*" also matches "/" (subjects are "mlx5_0/1").
type IgnoreRule struct {
	Pattern string
	Source  Position
}

// Matches reports whether the rule ignores finding id about subject (as
// rdmactl doctor names it: "host", "mlx5_0/1", "netdev ib0", "link rxe0").
func (r IgnoreRule) Matches(id, subject string) bool {
	idPat, subjPat, withSubject := strings.Cut(r.Pattern, ":")
	if !globAny(idPat, id) {
		return false
	}
	return !withSubject || globAny(subjPat, subject)
}

// globAny is path.Match in which "*" and "?" match "/" as well: a subject
// pattern "mlx5_*" should select "mlx5_0/1".
func globAny(pattern, s string) bool {
	const slash = "\x00"
	ok, _ := path.Match(strings.ReplaceAll(pattern, "/", slash), strings.ReplaceAll(s, "/", slash))
	return ok
}

// IgnoredBy returns the first rule that ignores finding id about subject.
func (d Doctor) IgnoredBy(id, subject string) (IgnoreRule, bool) {
	for _, r := range d.Ignore {
		if r.Matches(id, subject) {
			return r, true
		}
	}
	return IgnoreRule{}, false
}

// Error-counter sampling: [doctor.counters].
const (
	DefaultCounterInterval = time.Minute
	MinCounterInterval     = time.Second
	MaxCounterInterval     = time.Hour
)

// Counter is one error counter doctor watches: its name under the port's
// counters/ (InfiniBand PortCounters, through the PMA) or hw_counters/
// (driver statistics, RoCE among them) and its default threshold, an
// increase per hour.
type Counter struct {
	Name        string
	HW          bool   // under hw_counters/, else counters/
	DefaultHour uint64 // an increase above this within an hour is reported
}

// Counters are the error counters doctor watches, with their default
// thresholds. The InfiniBand ones are the defaults of infiniband-diags'
// ibcheckerrs (its threshold file), read as increases per hour;
// link_downed is the link-flap threshold (a third loss of link within the
// hour is reported). The RoCE ones are chosen so that a working lossless
// fabric stays under them; docs/guide.md says what each means.
var Counters = []Counter{
	{Name: "symbol_error", DefaultHour: 10},
	{Name: "link_error_recovery", DefaultHour: 10},
	{Name: "link_downed", DefaultHour: 2},
	{Name: "port_rcv_errors", DefaultHour: 10},
	{Name: "port_rcv_remote_physical_errors", DefaultHour: 100},
	{Name: "port_rcv_switch_relay_errors", DefaultHour: 100},
	{Name: "port_xmit_discards", DefaultHour: 100},
	{Name: "port_xmit_constraint_errors", DefaultHour: 100},
	{Name: "port_rcv_constraint_errors", DefaultHour: 100},
	{Name: "local_link_integrity_errors", DefaultHour: 10},
	{Name: "excessive_buffer_overrun_errors", DefaultHour: 10},
	{Name: "VL15_dropped", DefaultHour: 100},
	{Name: "out_of_sequence", HW: true, DefaultHour: 1000},
	{Name: "packet_seq_err", HW: true, DefaultHour: 1000},
	{Name: "implied_nak_seq_err", HW: true, DefaultHour: 1000},
	{Name: "local_ack_timeout_err", HW: true, DefaultHour: 100},
	{Name: "out_of_buffer", HW: true, DefaultHour: 1000},
	{Name: "rp_cnp_ignored", HW: true, DefaultHour: 1000},
	{Name: "rx_icrc_encapsulated", HW: true, DefaultHour: 10},
}

// CounterNamed returns the counter called name.
func CounterNamed(name string) (Counter, bool) {
	for _, c := range Counters {
		if c.Name == name {
			return c, true
		}
	}
	return Counter{}, false
}

// CounterPolicy is the [doctor.counters] table.
type CounterPolicy struct {
	// Interval between two samples (DefaultCounterInterval when unset).
	Interval time.Duration
	// Thresholds overrides the default threshold of a counter, by name.
	Thresholds map[string]CounterThreshold
}

// CounterThreshold is a threshold declared in [doctor.counters].
type CounterThreshold struct {
	PerHour uint64
	Source  Position
}

// Threshold is the threshold of counter c: declared, or its default
// (Source zero).
func (c CounterPolicy) Threshold(name string) CounterThreshold {
	if t, ok := c.Thresholds[name]; ok {
		return t
	}
	def, _ := CounterNamed(name)
	return CounterThreshold{PerHour: def.DefaultHour}
}

// The decoders.

// doctorDecl is what one file declares in [doctor].
type doctorDecl struct {
	ignore     []IgnoreRule
	interval   setting[time.Duration]
	thresholds map[string]CounterThreshold
}

// findingID is the shape of a finding id, glob characters allowed.
var findingID = regexp.MustCompile(`^[a-z0-9*?\[\]-]+$`)

// ignorePattern checks one [doctor] ignore entry.
func ignorePattern(s string) (string, error) {
	id, subject, withSubject := strings.Cut(s, ":")
	switch {
	case id == "":
		return "", fmt.Errorf("%q names no finding id: write \"ID\" or \"ID:SUBJECT\", such as \"port-no-sm:mlx4_0/1\"", s)
	case !findingID.MatchString(id):
		return "", fmt.Errorf("%q: %q is not a finding id (lower case, digits and '-', with glob characters), as rdmactl doctor -o json prints it", s, id)
	case withSubject && subject == "":
		return "", fmt.Errorf("%q has an empty subject: drop the ':' to ignore %s on every subject", s, id)
	}
	for _, p := range []string{id, subject} {
		if _, err := path.Match(p, ""); err != nil {
			return "", fmt.Errorf("%q is not a valid glob: %v", s, err)
		}
	}
	return s, nil
}

func (d *decoder) doctor(decl *fileDecl, p string, v any) {
	m, ok := d.singleTable(p, v)
	if !ok {
		return
	}
	d.table(p, m, "[doctor]", []field{
		{"ignore", func(kp string, v any) {
			a, ok := v.([]any)
			if !ok {
				d.failf(kp, `must be an array of finding ids, such as ["port-no-sm:mlx4_0/1", "nfs-*"], not %s`, describe(v))
				return
			}
			for i, e := range a {
				ep := indexPath(kp, i)
				if s, ok := d.stringValue(ep, e, ignorePattern); ok {
					decl.doctor.ignore = append(decl.doctor.ignore, IgnoreRule{Pattern: s, Source: d.pos(ep)})
				}
			}
		}},
		{"counters", func(kp string, v any) { d.counters(decl, kp, v) }},
	})
}

// counters decodes [doctor.counters]: interval, then one threshold key per
// counter doctor watches.
func (d *decoder) counters(decl *fileDecl, p string, v any) {
	m, ok := d.singleTable(p, v)
	if !ok {
		return
	}
	fields := []field{{"interval", func(kp string, v any) {
		s, ok := d.str(kp, v)
		if !ok {
			return
		}
		iv, err := time.ParseDuration(s)
		switch {
		case err != nil:
			d.failf(kp, "%q is not a duration: write a number and a unit, such as \"1m\" or \"30s\"", s)
		case iv < MinCounterInterval || iv > MaxCounterInterval:
			d.failf(kp, "%s is out of range: sample at least every %s and at most every %s", s, MaxCounterInterval, MinCounterInterval)
		default:
			decl.doctor.interval = setting[time.Duration]{iv, d.pos(kp), true}
		}
	}}}
	for _, c := range Counters {
		fields = append(fields, field{c.Name, func(kp string, v any) {
			if n, ok := d.integer(kp, v, 0, math.MaxInt64); ok {
				if decl.doctor.thresholds == nil {
					decl.doctor.thresholds = map[string]CounterThreshold{}
				}
				decl.doctor.thresholds[c.Name] = CounterThreshold{PerHour: uint64(n), Source: d.pos(kp)}
			}
		}})
	}
	d.table(p, m, "[doctor.counters]", fields)
}

// checkUnit accepts a systemd service name; "slurmd" means slurmd.service.
func checkUnit(s string) (string, error) {
	if !strings.Contains(s, ".") {
		s += ".service"
	}
	name, ok := strings.CutSuffix(s, ".service")
	if !ok {
		return "", fmt.Errorf("%q is not a service: memlock limits are a service's (LimitMEMLOCK=)", s)
	}
	if name == "" || len(s) > 255 || strings.ContainsAny(name, "/\\ \t\n") || strings.HasPrefix(name, "-") {
		return "", fmt.Errorf("%q is not a unit name", s)
	}
	return s, nil
}

// checkUnits decodes [memlock] check_units.
func (d *decoder) checkUnits(dst *setting[[]string]) field {
	return field{"check_units", func(p string, v any) {
		a, ok := v.([]any)
		if !ok {
			d.failf(p, `must be an array of service names, such as ["slurmd.service"], not %s`, describe(v))
			return
		}
		units := []string{}
		for i, e := range a {
			if s, ok := d.stringValue(indexPath(p, i), e, checkUnit); ok && !slices.Contains(units, s) {
				units = append(units, s)
			}
		}
		*dst = setting[[]string]{units, d.pos(p), true}
	}}
}

// expectRate accepts a rate in Gb/s: an integer or a float such as 12.5.
func (d *decoder) expectRate(dst *float64) field {
	return field{"rate", func(p string, v any) {
		var f float64
		switch x := v.(type) {
		case int64:
			f = float64(x)
		case float64:
			f = x
		default:
			d.failf(p, "must be a rate in Gb/s such as 200, not %s", describe(v))
			return
		}
		if f <= 0 || f > 1e6 || math.IsNaN(f) {
			d.failf(p, "%v is out of range: a rate is a positive number of Gb/s", f)
			return
		}
		*dst = f
	}}
}

// ParseWidth reads a port width as sysfs and the files write it: "4X".
func ParseWidth(s string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "X"))
	if err != nil || n <= 0 || !strings.HasSuffix(strings.ToUpper(s), "X") {
		return 0, false
	}
	return n, true
}

func (d *decoder) expectWidth(dst *int) field {
	return field{"width", func(p string, v any) {
		s, ok := d.str(p, v)
		if !ok {
			return
		}
		n, ok := ParseWidth(s)
		if !ok || !slices.Contains([]int{1, 2, 4, 8, 12}, n) {
			d.failf(p, "%q is not a link width: use \"1X\", \"2X\", \"4X\", \"8X\" or \"12X\" (as ibstat shows it)", s)
			return
		}
		*dst = n
	}}
}

// ParsePCIeLink reads "16.0 GT/s x16" (also "16 GT/s x16", "16GT/s x16").
func ParsePCIeLink(s string) (PCIeLink, bool) {
	f := strings.Fields(strings.ReplaceAll(s, "GT/s", " GT/s"))
	if len(f) != 3 || f[1] != "GT/s" || !strings.HasPrefix(f[2], "x") {
		return PCIeLink{}, false
	}
	gts, err1 := strconv.ParseFloat(f[0], 64)
	lanes, err2 := strconv.Atoi(f[2][1:])
	if err1 != nil || err2 != nil || gts <= 0 || lanes <= 0 {
		return PCIeLink{}, false
	}
	return PCIeLink{GTs: gts, Lanes: lanes}, true
}

var pcieSpeeds = []float64{2.5, 5, 8, 16, 32, 64}

func (d *decoder) expectPCIe(dst **PCIeLink) field {
	return field{"pcie", func(p string, v any) {
		s, ok := d.str(p, v)
		if !ok {
			return
		}
		l, ok := ParsePCIeLink(s)
		if !ok || !slices.Contains(pcieSpeeds, l.GTs) || !slices.Contains([]int{1, 2, 4, 8, 12, 16, 32}, l.Lanes) {
			d.failf(p, "%q is not a PCIe link: write speed and width as lspci shows them, such as \"16.0 GT/s x16\" (speeds 2.5, 5, 8, 16, 32, 64 GT/s)", s)
			return
		}
		*dst = &l
	}}
}

// maxExpectCount bounds [[expect]] count: more RDMA devices than a host
// can hold (SR-IOV: 1,024 virtual functions a device at most) is a typo.
const maxExpectCount = 65536

func (d *decoder) expect(p string, m map[string]any) (ExpectRule, bool) {
	before := len(d.errs)
	r := ExpectRule{Source: d.pos(p)}
	fields := append(d.selectorFields(&r.Selector),
		d.port(&r.Port),
		stringKey(d, "state", oneOf(`a port state: use "up" (ACTIVE, link up) or "down" (unused by design)`, string(ExpectUp), string(ExpectDown)), &r.State),
		d.expectRate(&r.Rate),
		d.expectWidth(&r.Width),
		d.expectPCIe(&r.PCIe),
		d.intKey("count", 1, maxExpectCount, &r.Count),
	)
	d.table(p, m, "[[expect]]", fields)
	if len(d.errs) > before {
		return r, false
	}
	if r.Selector == (Selector{}) {
		d.failf(p, "no device selector: set at least one of %s (device = \"*\" selects every device)", selectorKeys)
	}
	if r.State == "" && r.Rate == 0 && r.Width == 0 && r.PCIe == nil && r.Count == 0 {
		d.failf(p, "expects nothing: set state, rate, width, pcie, count or several")
	}
	if r.State == ExpectDown && (r.Rate != 0 || r.Width != 0) {
		d.failf(p, "state = \"down\" judges nothing about the port: drop rate and width, or expect state = \"up\"")
	}
	return r, len(d.errs) == before
}

// mergeDoctor merges the [doctor] tables of the files in order: ignore
// entries add up, interval and each threshold are taken key by key (the
// last file that sets one wins).
func mergeDoctor(decls []*fileDecl) Doctor {
	var out Doctor
	var interval setting[time.Duration]
	for _, d := range decls {
		out.Ignore = append(out.Ignore, d.doctor.ignore...)
		interval.override(d.doctor.interval)
		for name, t := range d.doctor.thresholds {
			if out.Counters.Thresholds == nil {
				out.Counters.Thresholds = map[string]CounterThreshold{}
			}
			out.Counters.Thresholds[name] = t
		}
	}
	out.Counters.Interval = interval.or(DefaultCounterInterval)
	return out
}

// CounterNames lists the counters' names, sorted, for documentation tests.
func CounterNames() []string {
	out := make([]string, len(Counters))
	for i, c := range Counters {
		out[i] = c.Name
	}
	sort.Strings(out)
	return out
}
