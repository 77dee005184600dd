package dbusapi

import (
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/daemon/config/value"
)

// RangeLine is a line of the contract, of the web console or of the
// example configuration that gives the range of a value outside the table
// of [[qos]] keys (the RoCE TOS; the example's comments):
// go generate ./dbusapi writes it from package value, as it writes what
// the table makes, so the range is written once.
type RangeLine struct {
	// In is the file: "contract" (org.rdmad1.xml), "cockpit"
	// (cockpit/index.html) or "example" (etc/rdma/rdmad.toml).
	In string
	// The line is the first that starts with Start after the text After.
	After, Start string
	// Line is the whole line, without its newline.
	Line string
}

// RangeLines are the lines of the contract and of the web console that
// go generate ./dbusapi writes from package value's ranges.
var RangeLines = []RangeLine{
	{In: "contract", After: "SetRoCE: set the default", Start: "      tos: ",
		Line: "      tos: " + value.TOSRange.String() + ", or -1 to keep."},
	{In: "contract", After: "<!--\n      DesiredRoCETOS: ", Start: "      DesiredRoCETOS: ",
		Line: "      DesiredRoCETOS: declared TOS " + value.TOSRange.String() + ", -1 when not declared."},
	{In: "cockpit", After: `<form id="roce-form"`, Start: `        <label>TOS <input id="roce-tos" `,
		Line: `        <label>TOS <input id="roce-tos" class="admin-only declares" type="number" min="` +
			strconv.FormatInt(value.TOSRange.Min, 10) + `" max="` + strconv.FormatInt(value.TOSRange.Max, 10) + `" placeholder="keep"></label>`},
	{In: "example", After: "#[[roce]]", Start: "#tos = ",
		Line: "#tos = 106              # " + value.TOSRange.String()},
	{In: "example", After: "#[[qos]]", Start: "#pfc = ",
		Line: "#pfc = [3]              # priorities " + value.PriorityRange.String() + " with PFC on"},
	{In: "example", After: "#[[qos]]", Start: "#dscp_prio = ",
		Line: "#dscp_prio = { 26 = 3 } # DSCP " + value.DSCPRange.String() + " = priority " + value.PriorityRange.String() + ` (trust "dscp" only)`},
}

// ManRange is a range the manual pages write by name: go generate
// ./dbusapi defines the roff strings \*[range-NAME], the range in words
// ("0 to 255", value.Range.Words), and \*[range-NAME-code], as messages
// write it ("0..255", value.Range.String), at the top of each page, from
// package value.
type ManRange struct {
	Name  string
	Range value.Range
}

// ManRanges are the ranges the manual pages write.
var ManRanges = []ManRange{
	{"tos", value.TOSRange},
	{"priority", value.PriorityRange},
	{"dscp", value.DSCPRange},
	{"traffic-class", value.TrafficClassRange},
	{"buffer", value.BufferRange},
	{"percent", value.PercentRange},
	{"cable-length", value.CableLengthRange},
	{"pfc-storm-timeout", value.PFCStormTimeoutRange},
	{"udp-port", value.UDPPortRange},
	{"buffer-bytes", value.BufferBytesRange},
}

// The lines of a manual page between which go generate ./dbusapi writes
// the strings of ManRanges.
const (
	ManRangesStart = `.\" The ranges below are package value's, written by go generate ./dbusapi; do not edit.`
	ManRangesEnd   = `.\" End of the generated ranges.`
)

// ManRangeStrings is the block of roff string definitions of ManRanges,
// its first and last lines included.
func ManRangeStrings() string {
	var b strings.Builder
	b.WriteString(ManRangesStart + "\n")
	for _, r := range ManRanges {
		b.WriteString(".ds range-" + r.Name + " " + r.Range.Words() + "\n")
		b.WriteString(".ds range-" + r.Name + "-code " + r.Range.String() + "\n")
	}
	b.WriteString(ManRangesEnd + "\n")
	return b.String()
}
