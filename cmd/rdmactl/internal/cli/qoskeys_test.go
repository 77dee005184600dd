package cli

import (
	"strconv"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/dbusapi"
)

// Every key of the contract's table that has a help has a qos set flag of
// its name, which rdmactl reads into the key's D-Bus type and refuses
// past either end of the key's range, naming the range.
func TestEveryQoSKeyHasItsFlag(t *testing.T) {
	cmd := qosSetCommand(&env{})
	flags := 0
	for _, k := range dbusapi.QoSKeys {
		f := cmd.Flags().Lookup(k.Flag())
		if k.Help == "" {
			if f != nil {
				t.Errorf("%s: a flag without a help in the table", k.Name)
			}
			continue
		}
		flags++
		if f == nil || f.Usage != k.HelpText() || strings.Contains(f.Usage, "{") {
			t.Errorf("%s: flag %+v, want --%s with %q", k.Name, f, k.Flag(), k.HelpText())
			continue
		}
		if _, err := flagValue(k, "?"); err == nil || strings.Contains(err.Error(), "cannot read") {
			t.Errorf("%s: rdmactl does not read its type %s: %v", k.Name, k.Type, err)
		}
		// Numbers: each end of the range taken, one past it refused.
		// trust and pfc have flags of their own handling; "as" values
		// are strings that rdmad parses.
		if k.Values.IsZero() || k.Type == "as" || k.Name == "trust" || k.Name == "pfc" {
			continue
		}
		text := func(n int64) string {
			if k.Type == "a{qy}" {
				return strconv.FormatInt(k.Keys.Min, 10) + ":" + strconv.FormatInt(n, 10)
			}
			return strings.TrimSuffix(strings.Repeat(strconv.FormatInt(n, 10)+",", max(k.Count, 1)), ",")
		}
		for _, n := range []int64{k.Values.Min, k.Values.Max} {
			if v, err := flagValue(k, text(n)); err != nil || v.Signature().String() != k.Type {
				t.Errorf("%s %s: %v %v, want a %s", k.Name, text(n), v, err, k.Type)
			}
		}
		for _, n := range []int64{k.Values.Min - 1, k.Values.Max + 1} {
			if k.Values.Off && n == 0 {
				continue
			}
			if _, err := flagValue(k, text(n)); err == nil || !strings.Contains(err.Error(), k.Values.String()) {
				t.Errorf("%s %s: %v, want it refused naming the range %s", k.Name, text(n), err, k.Values)
			}
		}
	}
	if flags < 15 {
		t.Fatalf("%d flags from the table; has it changed?", flags)
	}
}
