// Package fixturekernel is the kernel of a fixture host (an rdmad --root
// tree) for what a fixture cannot hold as files: the DCB and ethtool state
// of its netdevs. It lives in one file inside the tree (File), which rdmad
// reads and writes with --root only: DCB netlink and ethtool are served
// from it (Kernel), refusals come with the errno it names, a netdev's
// driver behaves as that driver does (Driver), and a change of the file,
// by rdmad or by anyone else, is announced as the kernel announces it
// (Watcher): a DCB notification, an ethtool pause notification, and for
// mlx5 the carrier drop a change of the PFC enable mask causes.
//
// The file holds values only, never counts of events (no PFC frame
// counters, no carrier changes): a fixture copied twice is the same host.
// State and Marshal are what writes it, for a fixture made by hand, by a
// test, or from a real host; docs/fixtures.md documents the format.
package fixturekernel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/daemon/dcb"
)

// Dir is the directory of the state file under the fixture's root; the
// Watcher watches it.
const Dir = "fixture"

// File is the state file, relative to the fixture's root.
const File = Dir + "/kernel.json"

// State is the state file: each netdev the fixture's kernel knows, by name.
type State struct {
	Netdevs map[string]*Netdev `json:"netdev"`
}

// Netdev is one netdev's state. A part that is absent is one the driver
// does not have: no DCB table is a netdev without dcbnl_ops (every DCB
// request is EOPNOTSUPP, as on veth), no pause table a driver without
// pause parameters, no pfc_storm_timeout one without the tunable.
type Netdev struct {
	// Driver is whose behaviour the netdev has (MLX5Driver); any other
	// name, or none, keeps what it is given as it is given.
	Driver string `json:"driver,omitempty"`
	// PFCStormTimeout is ethtool's pfc-prevention-tout in milliseconds.
	PFCStormTimeout *uint16 `json:"pfc_storm_timeout,omitempty"`
	// Refuse names the verbs the driver refuses, each with the errno it
	// answers ("EBUSY"); the verbs are those of Verbs.
	Refuse map[string]string `json:"refuse,omitempty"`
	Pause  *Pause            `json:"pause,omitempty"`
	DCB    *DCB              `json:"dcb,omitempty"`
}

// Pause is the global 802.3x pause (ethtool -a).
type Pause struct {
	Autoneg bool `json:"autoneg"`
	RX      bool `json:"rx"`
	TX      bool `json:"tx"`
}

// DCB is what DCB_CMD_IEEE_GET and DCB_CMD_GDCBX report. A nil object is
// one the driver does not report (and whose SET dcbnl skips).
type DCB struct {
	// DCBX is the DCBX capability bits as words: host, lld-managed, cee,
	// ieee, static. nil: the driver has no getdcbx (GDCBX is
	// EOPNOTSUPP).
	DCBX []string `json:"dcbx,omitempty"`
	// App is the APP table in the kernel's list order (newest first), as
	// iproute2's dcb app writes entries: "dscp-prio 26:3".
	App     []App    `json:"app"`
	PFC     *PFC     `json:"pfc,omitempty"`
	ETS     *ETS     `json:"ets,omitempty"`
	Maxrate *Maxrate `json:"maxrate,omitempty"`
	Buffer  *Buffer  `json:"buffer,omitempty"`
}

// PFC is struct ieee_pfc without its frame counters (requests,
// indications), which are counts of events.
type PFC struct {
	Cap          uint8  `json:"pfc_cap"`
	Enabled      []int  `json:"prio_pfc"` // the priorities with PFC on (pfc_en)
	MacsecBypass uint8  `json:"macsec_bypass"`
	Delay        uint16 `json:"delay"`
}

// ETS is struct ieee_ets; transmission selection algorithms as words
// (strict, cbs, ets, vendor).
type ETS struct {
	Willing    uint8     `json:"willing"`
	Cap        uint8     `json:"ets_cap"`
	CBS        uint8     `json:"cbs"`
	TxBW       [8]uint8  `json:"tc_bw"`
	RxBW       [8]uint8  `json:"tc_rx_bw"`
	TSA        [8]string `json:"tc_tsa"`
	PrioTC     [8]uint8  `json:"prio_tc"`
	RecoBW     [8]uint8  `json:"reco_tc_bw"`
	RecoTSA    [8]string `json:"reco_tc_tsa"`
	RecoPrioTC [8]uint8  `json:"reco_prio_tc"`
}

// Maxrate is struct ieee_maxrate: kbit/s per traffic class, 0 for none.
type Maxrate struct {
	Rate [8]uint64 `json:"tc_maxrate"`
}

// Buffer is struct dcbnl_buffer.
type Buffer struct {
	PrioBuffer [8]uint8  `json:"prio_buffer"`
	Size       [8]uint32 `json:"buffer_size"`
	Total      uint32    `json:"total_size"`
}

// App is one APP table entry, written as iproute2's dcb app writes it.
type App dcb.App

var appSelectors = []struct {
	word string
	sel  uint8
}{{"ethtype-prio", 1}, {"stream-port-prio", 2}, {dgramWord, dcb.SelDgram}, {"port-prio", 4}, {"dscp-prio", dcb.SelDSCP}}

const dgramWord = "dgram-port-prio"

// MarshalText writes "dscp-prio 26:3".
func (a App) MarshalText() ([]byte, error) {
	for _, s := range appSelectors {
		if s.sel == a.Selector {
			return fmt.Appendf(nil, "%s %d:%d", s.word, a.Protocol, a.Priority), nil
		}
	}
	return nil, fmt.Errorf("APP selector %d has no name", a.Selector)
}

// UnmarshalText reads what MarshalText writes (a protocol may be written
// in hexadecimal: "ethtype-prio 0x8906:3").
func (a *App) UnmarshalText(b []byte) error {
	word, entry, ok := strings.Cut(string(b), " ")
	proto, prio, ok2 := strings.Cut(entry, ":")
	if !ok || !ok2 {
		return fmt.Errorf("APP entry %q is not SELECTOR-prio PROTOCOL:PRIO (dscp-prio 26:3)", b)
	}
	for _, s := range appSelectors {
		if s.word != word {
			continue
		}
		p, err := strconv.ParseUint(proto, 0, 16)
		if err != nil {
			return fmt.Errorf("APP entry %q: protocol %q is not a number of 0..65535", b, proto)
		}
		q, err := strconv.ParseUint(prio, 10, 8)
		if err != nil {
			return fmt.Errorf("APP entry %q: priority %q is not a number", b, prio)
		}
		if err := value.Priority(int(q)); err != nil {
			return fmt.Errorf("APP entry %q: %w", b, err)
		}
		*a = App{Selector: s.sel, Protocol: uint16(p), Priority: uint8(q)}
		return nil
	}
	words := make([]string, len(appSelectors))
	for i, s := range appSelectors {
		words[i] = s.word
	}
	return fmt.Errorf("APP entry %q: selector %q is not one of %s", b, word, strings.Join(words, ", "))
}

// The verbs a netdev may refuse (Netdev.Refuse): the methods of
// dcb.Kernel and ethtool.Kernel.
const (
	VerbGet                = "get" // DCB_CMD_IEEE_GET
	VerbDCBX               = "dcbx"
	VerbSetPFC             = "set_pfc"
	VerbSetETS             = "set_ets"
	VerbSetMaxrate         = "set_maxrate"
	VerbSetBuffer          = "set_buffer"
	VerbSetApp             = "set_app"
	VerbDelApp             = "del_app"
	VerbSetDCBX            = "set_dcbx"
	VerbPause              = "pause"
	VerbSetPause           = "set_pause"
	VerbPFCStormTimeout    = "pfc_storm_timeout"
	VerbSetPFCStormTimeout = "set_pfc_storm_timeout"
)

// Verbs lists every verb, in the order of the interfaces.
var Verbs = []string{VerbGet, VerbDCBX, VerbSetPFC, VerbSetETS, VerbSetMaxrate, VerbSetBuffer, VerbSetApp, VerbDelApp,
	VerbSetDCBX, VerbPause, VerbSetPause, VerbPFCStormTimeout, VerbSetPFCStormTimeout}

var dcbxWords = []struct {
	word string
	bit  uint8
}{{"host", dcb.CapHost}, {"lld-managed", dcb.CapLLDManaged}, {"cee", dcb.CapVerCEE}, {"ieee", dcb.CapVerIEEE}, {"static", dcb.CapStatic}}

// DCBXWords writes DCBX capability bits as the state file does.
func DCBXWords(caps uint8) []string {
	out := []string{}
	for _, w := range dcbxWords {
		if caps&w.bit != 0 {
			out = append(out, w.word)
		}
	}
	return out
}

func dcbxBits(words []string) (uint8, error) {
	var caps uint8
	for _, word := range words {
		found := false
		for _, w := range dcbxWords {
			if w.word == word {
				caps |= w.bit
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("DCBX mode %q is not one of host, lld-managed, cee, ieee, static", word)
		}
	}
	return caps, nil
}

var tsaWords = []dcb.TSA{dcb.TSAStrict, dcb.TSACBShaper, dcb.TSAETS, dcb.TSAVendor}

// tsaOf reads a word of tc_tsa; none is strict, the zero of struct
// ieee_ets (an array left out of the file reads as the kernel's zeroes).
func tsaOf(word string) (dcb.TSA, error) {
	if word == "" {
		return dcb.TSAStrict, nil
	}
	for _, t := range tsaWords {
		if t.String() == word {
			return t, nil
		}
	}
	return 0, fmt.Errorf("transmission selection %q is not one of strict, cbs, ets, vendor", word)
}

// Errno returns the errno a refusal names ("EBUSY").
func Errno(name string) (syscall.Errno, error) {
	for e := syscall.Errno(1); e < 256; e++ {
		if unix.ErrnoName(e) == name {
			return e, nil
		}
	}
	return 0, fmt.Errorf("%q is not an errno name (EBUSY, EINVAL, EOPNOTSUPP, ...)", name)
}

// Parse reads a state file's bytes; name is what errors call it. Unknown
// keys, malformed values and refusals of unknown verbs are errors naming
// the line or the netdev and key.
func Parse(name string, data []byte) (*State, error) {
	var s State
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		offset := dec.InputOffset()
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			offset = se.Offset
		case errors.As(err, &te):
			offset = te.Offset
		}
		return nil, fmt.Errorf("%s line %d: %w", name, lineOf(data, unknownKeyAt(data, err, offset)), err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s line %d: more than one JSON value", name, lineOf(data, dec.InputOffset()))
	}
	if s.Netdevs == nil {
		s.Netdevs = map[string]*Netdev{}
	}
	for _, ifname := range s.names() {
		if err := s.Netdevs[ifname].check(); err != nil {
			return nil, fmt.Errorf("%s: netdev %s: %w", name, ifname, err)
		}
	}
	return &s, nil
}

// unknownKeyAt is where the key an unknown-field error names is in data
// (the decoder reports it after the whole value, at its end), else
// offset.
func unknownKeyAt(data []byte, err error, offset int64) int64 {
	const marker = `json: unknown field "`
	msg := err.Error()
	i := strings.Index(msg, marker)
	if i < 0 {
		return offset
	}
	key, _, ok := strings.Cut(msg[i+len(marker):], `"`)
	if !ok {
		return offset
	}
	quoted, _ := json.Marshal(key)
	for at := 0; ; {
		j := bytes.Index(data[at:], quoted)
		if j < 0 {
			return offset
		}
		rest := bytes.TrimLeft(data[at+j+len(quoted):], " \t\r\n")
		if len(rest) > 0 && rest[0] == ':' {
			return int64(at + j)
		}
		at += j + len(quoted)
	}
}

// lineOf is the line of data's byte offset, from 1.
func lineOf(data []byte, offset int64) int {
	offset = min(max(offset, 0), int64(len(data)))
	return bytes.Count(data[:offset], []byte("\n")) + 1
}

func (s *State) names() []string {
	names := make([]string, 0, len(s.Netdevs))
	for n := range s.Netdevs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// check refuses what the netdev's kernel could not hold; its error starts
// with the key.
func (n *Netdev) check() error {
	if n == nil {
		return errors.New("is null")
	}
	for _, verb := range sortedKeys(n.Refuse) {
		known := false
		for _, v := range Verbs {
			known = known || v == verb
		}
		if !known {
			return fmt.Errorf("refuse.%s: not a verb (%s)", verb, strings.Join(Verbs, ", "))
		}
		if _, err := Errno(n.Refuse[verb]); err != nil {
			return fmt.Errorf("refuse.%s: %w", verb, err)
		}
	}
	if n.DCB == nil {
		return nil
	}
	if _, err := dcbxBits(n.DCB.DCBX); err != nil {
		return fmt.Errorf("dcb.dcbx: %w", err)
	}
	if p := n.DCB.PFC; p != nil {
		if err := value.Priorities(p.Enabled); err != nil {
			return fmt.Errorf("dcb.pfc.prio_pfc: %w", err)
		}
	}
	if e := n.DCB.ETS; e != nil {
		for i := range e.TSA {
			if _, err := tsaOf(e.TSA[i]); err != nil {
				return fmt.Errorf("dcb.ets.tc_tsa: %w", err)
			}
			if _, err := tsaOf(e.RecoTSA[i]); err != nil {
				return fmt.Errorf("dcb.ets.reco_tc_tsa: %w", err)
			}
		}
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Marshal writes s as the state file.
func Marshal(s *State) ([]byte, error) {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the fixture's kernel state: %w", err)
	}
	return append(b, '\n'), nil
}
