package dbusapi

import (
	"strconv"

	"github.com/rdmad/rdmad/daemon/config/value"
)

// RangeLine is a line of the contract or of the web console that gives
// the range of a value outside the table of [[qos]] keys (the RoCE TOS):
// go generate ./dbusapi writes it from package value, as it writes what
// the table makes, so the range is written once.
type RangeLine struct {
	// In is the file: "contract" (org.rdmad1.xml) or "cockpit"
	// (cockpit/index.html).
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
}
