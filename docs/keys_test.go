package docs

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/config/value"
	"github.com/rdmad/rdmad/dbusapi"
)

// TestEveryQoSKeyHasEachFacet holds a [[qos]] key to what "Adding a
// setting" in architecture.md says it needs, across the packages that
// hold it: the configuration's table (config.QoSKeys) and the contract's
// (dbusapi.QoSKeys, from which rdmactl's flag, the web console's field
// and the contract's words are made, each tested where it is made) list
// the same keys in the same order with the same ranges; the decoder, which
// the D-Bus call goes through too, takes each end of each range and
// refuses one past it; a part keeps a setting declared by the key; and
// rdmad.toml(5) documents the key with its range and its choices.
func TestEveryQoSKeyHasEachFacet(t *testing.T) {
	files, contract := config.QoSKeys(), dbusapi.QoSKeys
	var fileNames, contractNames []string
	for _, k := range files {
		fileNames = append(fileNames, k.Name)
	}
	for _, k := range contract {
		contractNames = append(contractNames, k.Name)
	}
	if !slices.Equal(fileNames, contractNames) {
		t.Fatalf("the configuration's [[qos]] keys are\n%v\nthe contract's (dbusapi.QoSKeys)\n%v", fileNames, contractNames)
	}
	kept := map[config.Key]bool{}
	for _, part := range parts(t) {
		for _, s := range part.settings {
			kept[s.Key] = true
		}
	}
	man, err := os.ReadFile("rdmad.toml.5")
	if err != nil {
		t.Fatal(err)
	}
	page := expandManStrings(string(man))
	section := page[strings.Index(page, ".SS [[qos]]"):]
	section = section[:strings.Index(section[1:], "\n.SS ")+1]
	for i, c := range contract {
		f := files[i]
		if f.Values != c.Values || f.Keys != c.Keys || (c.Count != 0 && f.Count != c.Count) {
			t.Errorf("%s: the configuration says values %s, keys %s, %d elements; the contract %s, %s, %d", c.Name, f.Values, f.Keys, f.Count, c.Values, c.Keys, c.Count)
		}
		if !kept[f.Key] {
			t.Errorf("%s: no part keeps a setting declared by %s", c.Name, f.Key)
		}
		checkDecoderRange(t, c)
		para := manParagraph(section, c.Name)
		if para == "" {
			t.Errorf("rdmad.toml(5) does not document [[qos]] %s", c.Name)
			continue
		}
		for _, r := range []value.Range{c.Values, c.Keys} {
			if !r.IsZero() && !strings.Contains(strings.Join(strings.Fields(para), " "), r.Words()) {
				t.Errorf("rdmad.toml(5) does not give %s's range %q", c.Name, r.Words())
			}
		}
		for _, choice := range c.Choices {
			if !strings.Contains(para, `\(dq`+choice+`\(dq`) {
				t.Errorf("rdmad.toml(5) does not give %s's choice %q", c.Name, choice)
			}
		}
	}
}

// manParagraph is the tagged paragraph of key in a section of a manual
// page: from ".TP\n.B key\n" to the next paragraph.
func manParagraph(section, key string) string {
	i := strings.Index(section, ".TP\n.B "+key+"\n")
	if i < 0 {
		return ""
	}
	p := section[i+len(".TP\n"):]
	if j := strings.Index(p, "\n.TP\n"); j >= 0 {
		p = p[:j]
	}
	if j := strings.Index(p, "\n.PP\n"); j >= 0 {
		p = p[:j]
	}
	return p
}

// checkDecoderRange sends the key's values at each end of its ranges, and
// one past them, through the decoder of a call's settings, with values of
// the key's D-Bus type as the bus hands them over (integers as int64,
// arrays as []any, tables keyed by decimal strings).
func checkDecoderRange(t *testing.T, k dbusapi.QoSKey) {
	t.Helper()
	n := func(v int64) any { return v }
	of := func(v int64) any {
		switch {
		case k.Type == "ay" && k.Count == 0:
			return []any{v}
		case k.Count > 0:
			a := []any{v}
			for len(a) < k.Count {
				a = append(a, k.Values.Min)
			}
			return a
		case strings.HasPrefix(k.Type, "a{"):
			return map[string]any{strconv.FormatInt(k.Keys.Min, 10): v}
		}
		return n(v)
	}
	decode := func(x any) error {
		_, err := config.DecodeQoSSettings(map[string]any{k.Name: x})
		return err
	}
	try := func(what string, x any, ok bool) {
		err := decode(x)
		if ok && err != nil {
			t.Errorf("%s %s: refused: %v", k.Name, what, err)
		}
		if !ok && err == nil {
			t.Errorf("%s %s: taken", k.Name, what)
		}
	}
	if r := k.Values; !r.IsZero() {
		for _, v := range []int64{r.Min, r.Max} {
			try(fmt.Sprintf("value %d", v), of(v), true)
		}
		for _, v := range []int64{r.Min - 1, r.Max + 1} {
			try(fmt.Sprintf("value %d", v), of(v), r.Off && v == 0)
		}
		if r.Off {
			try("value 0 (off)", of(0), true)
		}
	}
	if r := k.Keys; !r.IsZero() {
		entry := func(key int64) any { return map[string]any{strconv.FormatInt(key, 10): k.Values.Min} }
		try(fmt.Sprintf("key %d", r.Min), entry(r.Min), true)
		try(fmt.Sprintf("key %d", r.Max), entry(r.Max), true)
		try(fmt.Sprintf("key %d", r.Min-1), entry(r.Min-1), false)
		try(fmt.Sprintf("key %d", r.Max+1), entry(r.Max+1), false)
	}
	if len(k.Choices) > 0 && k.Type == "s" {
		for _, c := range k.Choices {
			try(strconv.Quote(c), c, true)
		}
		try(`"x"`, "x", false)
	}
}
