package config

// The decoders of each table's keys: decode.go walks a file, these turn
// one table's values into typed settings with file:line errors.

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/rdmad/rdmad/daemon/config/value"
)

// Key decoders: each makes the field of one key, so a table lists its keys
// one per line. check validates and normalises a string; nil accepts it.

type check func(string) (string, error)

// is turns a validator into a check that keeps the value.
func is(valid func(string) error) check {
	return func(s string) (string, error) { return s, valid(s) }
}

// oneOf accepts the listed values only; msg says what the key takes.
func oneOf(msg string, values ...string) check {
	return func(s string) (string, error) {
		for _, v := range values {
			if s == v {
				return s, nil
			}
		}
		return "", fmt.Errorf("%q is not %s", s, msg)
	}
}

// absPath accepts an absolute path and cleans it.
func absPath(s string) (string, error) {
	if !filepath.IsAbs(s) {
		return "", fmt.Errorf("%q must be an absolute path (the host root is prefixed by rdmad)", s)
	}
	return filepath.Clean(s), nil
}

// stringValue decodes and checks the string of key p.
func (d *decoder) stringValue(p string, v any, c check) (string, bool) {
	s, ok := d.str(p, v)
	if !ok {
		return "", false
	}
	if c != nil {
		var err error
		if s, err = c(s); err != nil {
			d.failf(p, "%v", err)
			return "", false
		}
	}
	return s, true
}

// stringKey decodes a string key into dst.
func stringKey[T ~string](d *decoder, name string, c check, dst *T) field {
	return field{name, func(p string, v any) {
		if s, ok := d.stringValue(p, v, c); ok {
			*dst = T(s)
		}
	}}
}

// stringSetting decodes a string key of a merged table into dst.
func stringSetting[T ~string](d *decoder, name string, c check, dst *setting[T]) field {
	return field{name, func(p string, v any) {
		if s, ok := d.stringValue(p, v, c); ok {
			*dst = setting[T]{T(s), d.pos(p), true}
		}
	}}
}

// boolSetting decodes a boolean key of a merged table into dst.
func (d *decoder) boolSetting(name string, dst *setting[bool]) field {
	return field{name, func(p string, v any) {
		if b, ok := d.boolean(p, v); ok {
			*dst = setting[bool]{b, d.pos(p), true}
		}
	}}
}

// limitSetting decodes a memlock limit: "unlimited", a size, or bytes.
func (d *decoder) limitSetting(name string, dst *setting[Limit]) field {
	return field{name, func(p string, v any) {
		var l Limit
		switch x := v.(type) {
		case string:
			var err error
			if l, err = ParseLimit(x); err != nil {
				d.failf(p, "%v", err)
				return
			}
		case int64:
			if x <= 0 {
				d.failf(p, "%d is out of range: a limit is a positive number of bytes or \"unlimited\"", x)
				return
			}
			l = Limit{Bytes: uint64(x)}
		default:
			d.failf(p, "must be \"unlimited\" or a size such as \"64G\", not %s", describe(v))
			return
		}
		*dst = setting[Limit]{l, d.pos(p), true}
	}}
}

// intKey decodes an integer in lo..hi into dst.
func (d *decoder) intKey(name string, lo, hi int64, dst *int) field {
	return field{name, func(p string, v any) {
		if n, ok := d.integer(p, v, lo, hi); ok {
			*dst = n
		}
	}}
}

// validIntKey decodes an integer that valid accepts into *dst, which
// stays nil when the key is absent.
func (d *decoder) validIntKey(name string, valid func(int) error, dst **int) field {
	return field{name, func(p string, v any) {
		n, ok := d.integer(p, v, math.MinInt32, math.MaxInt32)
		if !ok {
			return
		}
		if err := valid(n); err != nil {
			d.failf(p, "%v", err)
			return
		}
		*dst = &n
	}}
}

// problems reports what a rule's Validate found, each at its key.
func (d *decoder) problems(path string, ps []Problem) {
	for _, pr := range ps {
		at := path
		if pr.Key != "" {
			at = joinPath(path, pr.Key)
		}
		d.failf(at, "%v", pr.Err)
	}
}

func (d *decoder) modules(decl *fileDecl, path string, v any) {
	if m, ok := d.singleTable(path, v); ok {
		d.table(path, m, "[modules]", []field{
			d.boolSetting("enable", &decl.modules.enable),
			stringSetting(d, "directory", absPath, &decl.modules.directory),
		})
	}
}

func (d *decoder) memlock(decl *fileDecl, path string, v any) {
	m, ok := d.singleTable(path, v)
	if !ok {
		return
	}
	// [memlock] makes rdmad manage the limits, even empty; check_units
	// alone (what doctor checks) does not.
	if _, units := m["check_units"]; !units || len(m) > 1 {
		decl.memlock.present, decl.memlock.pos = true, d.pos(path)
	}
	d.table(path, m, "[memlock]", []field{
		d.boolSetting("enable", &decl.memlock.enable),
		stringSetting(d, "group", is(validGroupName), &decl.memlock.group),
		d.limitSetting("soft", &decl.memlock.soft),
		d.limitSetting("hard", &decl.memlock.hard),
		d.boolSetting("services", &decl.memlock.services),
		d.checkUnits(&decl.memlock.checkUnits),
	})
	// Within one file soft > hard is certain to be an error; across files
	// it is checked again after merging.
	if s, h := decl.memlock.soft, decl.memlock.hard; s.Set && h.Set && s.Value.above(h.Value) {
		d.failf(joinPath(path, "soft"), "%s is above memlock.hard %s; the soft limit cannot exceed the hard one", s.Value.Human(), h.Value.Human())
	}
}

func (d *decoder) netns(decl *fileDecl, path string, v any) {
	if m, ok := d.singleTable(path, v); ok {
		d.table(path, m, "[netns]", []field{
			stringSetting(d, "mode", is(value.NetnsMode), &decl.netns.mode),
		})
	}
}

func (d *decoder) metrics(decl *fileDecl, path string, v any) {
	if m, ok := d.singleTable(path, v); ok {
		d.table(path, m, "[metrics]", []field{
			stringSetting(d, "textfile", textfilePath, &decl.metrics.textfile),
		})
	}
}

// selectorFields decodes the device-selecting keys shared by [[roce]] and [[vpi]].
func (d *decoder) selectorFields(sel *Selector) []field {
	return []field{
		{"device", func(p string, v any) {
			if s, ok := d.stringValue(p, v, is(validGlob)); ok {
				sel.Device = Glob(s)
			}
		}},
		stringKey(d, "guid", normalizeGUID, &sel.GUID),
		stringKey(d, "pci", normalizePCI, &sel.PCI),
		stringKey(d, "netdev", is(validGlob), &sel.Netdev),
		stringKey(d, "driver", is(validDriver), &sel.Driver),
	}
}

const selectorKeys = "device, guid, pci, netdev or driver"

func (d *decoder) port(dst *int) field { return d.intKey("port", 1, math.MaxUint32, dst) }

func (d *decoder) roce(path string, m map[string]any) (RoCERule, bool) {
	before := len(d.errs)
	r := RoCERule{Source: d.pos(path)}
	fields := append(d.selectorFields(&r.Selector),
		d.port(&r.Port),
		stringKey(d, "mode", is(value.RoCEMode), &r.Mode),
		d.validIntKey("tos", value.TOS, &r.TOS),
		field{"traffic_class", func(p string, v any) {
			if b, ok := d.boolean(p, v); ok {
				r.TrafficClass = &b
			}
		}},
	)
	d.table(path, m, "[[roce]]", fields)
	if len(d.errs) > before {
		return r, false
	}
	d.problems(path, r.Validate())
	return r, len(d.errs) == before
}

func (d *decoder) vpi(path string, m map[string]any) (VPIRule, bool) {
	before := len(d.errs)
	r := VPIRule{Source: d.pos(path)}
	fields := append(d.selectorFields(&r.Selector),
		d.port(&r.Port),
		stringKey(d, "type", oneOf(`a VPI port type: use "ib", "eth" or "auto"`, string(VPIib), string(VPIeth), string(VPIauto)), &r.Type),
	)
	d.table(path, m, "[[vpi]]", fields)
	if len(d.errs) > before {
		return r, false
	}
	if r.Selector == (Selector{}) {
		d.failf(path, "no device selector: set at least one of %s", selectorKeys)
	}
	if r.Type == "" {
		d.failf(path, "missing key type (\"ib\", \"eth\" or \"auto\")")
	}
	return r, len(d.errs) == before
}

func (d *decoder) qos(path string, m map[string]any) (QoSRule, bool) {
	before := len(d.errs)
	r := QoSRule{Source: d.pos(path)}
	seen := map[string]bool{}
	fields := append(d.selectorFields(&r.Selector), d.port(&r.Port))
	fields = append(fields, d.qosFields(&r, seen)...)
	d.table(path, m, "[[qos]]", fields)
	if len(d.errs) > before {
		return r, false
	}
	d.checkLossless(path, &r.LosslessRule, seen)
	d.problems(path, r.Validate())
	return r, len(d.errs) == before
}

// qosFields decodes the settings of a [[qos]] rule (all but the selector
// and the port); seen records the keys given.
func (d *decoder) qosFields(r *QoSRule, seen map[string]bool) []field {
	fields := make([]field, 0, 3+len(losslessKeys)+1)
	fields = append(fields,
		stringKey(d, "trust", is(value.Trust), &r.Trust),
		field{"pfc", func(p string, v any) { r.PFC, r.HasPFC = d.prioList(p, v, "[] turns PFC off") }},
		field{"dscp_prio", func(p string, v any) { r.DSCPPrio = d.dscpPrio(p, v) }},
	)
	return d.losslessFields(&r.LosslessRule, seen, fields)
}

// checkQoS checks the settings of a call (DecodeQoSSettings) against each
// other, as a rule's are but for its selector.
func (d *decoder) checkQoS(path string, r *QoSRule, seen map[string]bool) {
	d.checkLossless(path, &r.LosslessRule, seen)
	d.problems(path, r.validateSettings())
}

// prioList decodes a set of priorities (pfc, ecn): an array of distinct
// priorities (value.PriorityRange), returned ascending; offHint says what
// [] does.
func (d *decoder) prioList(p string, v any, offHint string) ([]uint8, bool) {
	a, ok := v.([]any)
	if !ok {
		d.failf(p, "must be an array of priorities %s such as [3] (%s), not %s", value.PriorityRange, offHint, describe(v))
		return nil, false
	}
	ps := make([]int, len(a))
	for i, e := range a {
		if ps[i], ok = d.integer(indexPath(p, i), e, math.MinInt32, math.MaxInt32); !ok {
			return nil, false
		}
	}
	if err := value.Priorities(ps); err != nil {
		d.failf(p, "%v", err)
		return nil, false
	}
	slices.Sort(ps)
	out := make([]uint8, len(ps))
	for i, n := range ps {
		out[i] = uint8(n)
	}
	return out, true
}

// dscpPrio decodes dscp_prio: a table of DSCP = priority.
func (d *decoder) dscpPrio(p string, v any) map[uint8]uint8 {
	m, ok := v.(map[string]any)
	if !ok {
		d.failf(p, "must be a table of DSCP = priority such as { 26 = 3 }, not %s", describe(v))
		return nil
	}
	out := map[uint8]uint8{}
	for k, e := range m {
		kp := joinPath(p, k)
		dscp, err := strconv.ParseUint(k, 10, 8)
		if err != nil {
			d.failf(kp, "%q is not a DSCP value: use %s", k, value.DSCPRange)
			continue
		}
		prio, ok := d.integer(kp, e, math.MinInt32, math.MaxInt32)
		if !ok {
			continue
		}
		if err := dscpEntry(int(dscp), prio); err != nil {
			d.failf(kp, "%v", err)
			continue
		}
		out[uint8(dscp)] = uint8(prio)
	}
	return out
}

func (d *decoder) link(path string, m map[string]any) (Link, bool) {
	before := len(d.errs)
	l := Link{Source: d.pos(path)}
	d.table(path, m, "[[link]]", []field{
		stringKey(d, "name", is(value.LinkName), &l.Name),
		stringKey(d, "type", is(value.LinkType), &l.Type),
		stringKey(d, "netdev", is(value.NetdevName), &l.Netdev),
	})
	if len(d.errs) > before {
		return l, false
	}
	d.problems(path, l.Validate())
	return l, len(d.errs) == before
}
