// Command gendoc writes what is made from the contract: the settings
// paragraph of SetQoSSettings in org.rdmad1.xml and the web console's
// lossless form, both from the table of [[qos]] keys (dbusapi.QoSKeys),
// the lines of both and of the example configuration that give another
// value's range (dbusapi.RangeLines), the ranges the manual pages name
// (dbusapi.ManRanges), then docs/dbus-api.md from the contract as
// rewritten.
package main

import (
	"bytes"
	"fmt"
	"html"
	"os"
	"strconv"
	"strings"

	"github.com/rdmad/rdmad/dbusapi"
)

func main() {
	if len(os.Args) < 5 {
		fmt.Fprintln(os.Stderr, "usage: gendoc CONTRACT.xml COCKPIT-INDEX.html OUTPUT.md EXAMPLE.toml [MANPAGE...]")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5:]); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}

func run(contractFile, indexFile, markdownFile, exampleFile string, manPages []string) error {
	if _, err := rewrite(exampleFile, func(b []byte) ([]byte, error) { return withRangeLines(b, "example") }); err != nil {
		return err
	}
	for _, page := range manPages {
		if _, err := rewrite(page, withManRanges); err != nil {
			return err
		}
	}
	contract, err := rewrite(contractFile, func(b []byte) ([]byte, error) {
		b, err := withSettingsDoc(b)
		if err != nil {
			return nil, err
		}
		return withRangeLines(b, "contract")
	})
	if err != nil {
		return err
	}
	if _, err := rewrite(indexFile, func(b []byte) ([]byte, error) {
		b, err := withQoSForm(b)
		if err != nil {
			return nil, err
		}
		return withRangeLines(b, "cockpit")
	}); err != nil {
		return err
	}
	c, err := dbusapi.ParseContract(contract)
	if err != nil {
		return err
	}
	return os.WriteFile(markdownFile, c.Markdown(), 0o644)
}

// rewrite puts the generated part into file and returns its new bytes.
func rewrite(file string, with func([]byte) ([]byte, error)) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out, err := with(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if bytes.Equal(out, data) {
		return out, nil
	}
	return out, os.WriteFile(file, out, 0o644)
}

// between replaces the lines from the first that starts with start after
// after, up to the next that starts with end (which is kept), with text.
func between(data []byte, after, start, end, text string) ([]byte, error) {
	s := string(data)
	from := strings.Index(s, after)
	if from < 0 {
		return nil, fmt.Errorf("no %q", after)
	}
	i := strings.Index(s[from:], "\n"+start)
	if i < 0 {
		return nil, fmt.Errorf("no line %q after %q", start, after)
	}
	i += from + 1
	j := strings.Index(s[i:], "\n"+end)
	if j < 0 {
		return nil, fmt.Errorf("no line %q after %q", end, start)
	}
	j += i + 1
	return []byte(s[:i] + text + s[j:]), nil
}

// withRangeLines writes the lines of data that dbusapi.RangeLines gives
// for the file in.
func withRangeLines(data []byte, in string) ([]byte, error) {
	for _, l := range dbusapi.RangeLines {
		if l.In != in {
			continue
		}
		s := string(data)
		from := strings.Index(s, l.After)
		if from < 0 {
			return nil, fmt.Errorf("no %q", l.After)
		}
		i := strings.Index(s[from:], "\n"+l.Start)
		if i < 0 {
			return nil, fmt.Errorf("no line %q after %q", l.Start, l.After)
		}
		i += from + 1
		j := strings.IndexByte(s[i:], '\n')
		if j < 0 {
			return nil, fmt.Errorf("line %q has no end", l.Start)
		}
		data = []byte(s[:i] + l.Line + s[i+j:])
	}
	return data, nil
}

// withManRanges writes the roff strings of dbusapi.ManRanges into a
// manual page, between its two marker lines.
func withManRanges(page []byte) ([]byte, error) {
	s := string(page)
	i := strings.Index(s, "\n"+dbusapi.ManRangesStart+"\n")
	j := strings.Index(s, "\n"+dbusapi.ManRangesEnd+"\n")
	if i < 0 || j < i {
		return nil, fmt.Errorf("no lines %q and %q", dbusapi.ManRangesStart, dbusapi.ManRangesEnd)
	}
	return []byte(s[:i+1] + dbusapi.ManRangeStrings() + s[j+len(dbusapi.ManRangesEnd)+2:]), nil
}

// The settings paragraph is the lines of SetQoSSettings' comment from
// "settings:" to "persist:".
const (
	docIndent   = "      "
	docWidth    = 70
	settingsDoc = docIndent + "settings: "
	persistDoc  = docIndent + "persist: "
)

func withSettingsDoc(xml []byte) ([]byte, error) {
	return between(xml, "SetQoSSettings: declare", settingsDoc, persistDoc, SettingsDoc(dbusapi.QoSKeys))
}

// SettingsDoc is the settings paragraph of SetQoSSettings: each key, its
// D-Bus type and its values, as the table gives them.
func SettingsDoc(keys []dbusapi.QoSKey) string {
	var b strings.Builder
	wrap(&b, "", "settings: the [[qos]] keys and their values, validated as the files' are (a bad value is InvalidArgs naming the key, and nothing is touched). Integer arguments may be of any D-Bus integer type; keys not given keep what the files declare:")
	for _, k := range keys {
		wrap(&b, "  ", fmt.Sprintf("- %q %s: %s", k.Name, k.Type, k.DocText()))
	}
	return b.String()
}

// wrap writes text as comment lines of docWidth, each further line
// indented by hang.
func wrap(b *strings.Builder, hang, text string) {
	prefix, line := docIndent, ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(prefix)+len(line)+1+len(w) > len(docIndent)+docWidth {
			b.WriteString(prefix + line + "\n")
			prefix, line = docIndent+hang, ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	b.WriteString(prefix + line + "\n")
}

// The lossless form's fields lie between these lines of
// cockpit/index.html.
const (
	formStart = "        <!-- The fields below are made from the contract's table of [[qos]] keys (dbusapi.QoSKeys) by go generate ./dbusapi; do not edit. -->"
	formEnd   = "        <!-- End of the generated fields. -->"
)

func withQoSForm(page []byte) ([]byte, error) {
	return between(page, `<form id="qos-form"`, formStart, formEnd, formStart+"\n"+QoSForm(dbusapi.QoSKeys))
}

// QoSForm is the fields of the web console's lossless form: one for each
// key the table gives a label, named by its key and D-Bus type
// (data-key, data-type), which the page's script sends as they are.
func QoSForm(keys []dbusapi.QoSKey) string {
	var b strings.Builder
	for _, k := range keys {
		if k.Form == "" {
			continue
		}
		id := "qos-" + k.Flag()
		attrs := fmt.Sprintf(`id=%q class="admin-only" data-key=%q data-type=%q`, id, k.Name, k.Type)
		label := html.EscapeString(k.Form)
		switch {
		case k.Type == "s" || k.Type == "b":
			choices := k.Choices
			if k.Type == "b" {
				choices = []string{"off", "on"}
			}
			fmt.Fprintf(&b, "        <label>%s <select %s>\n          <option value=\"\">keep</option>\n", label, attrs)
			for _, c := range choices {
				fmt.Fprintf(&b, "          <option value=%q>%s</option>\n", c, html.EscapeString(c))
			}
			b.WriteString("        </select></label>\n")
		case k.Type == "ay" && k.Count == 0:
			fmt.Fprintf(&b, "        <label>%s <input %s type=\"text\" data-min=\"%d\" data-max=\"%d\" placeholder=\"keep (3, or none)\"></label>\n",
				label, attrs, k.Values.Min, k.Values.Max)
		case k.Type == "u" || k.Type == "y" || k.Type == "q":
			lo := k.Values.Min
			if k.Values.Off {
				lo = 0
			}
			fmt.Fprintf(&b, "        <label>%s <input %s type=\"number\" min=\"%s\" max=\"%s\" placeholder=\"keep\"></label>\n",
				label, attrs, strconv.FormatInt(lo, 10), strconv.FormatInt(k.Values.Max, 10))
		default:
			fmt.Fprintf(&b, "        <!-- %s: the form has no field for a %s -->\n", k.Name, k.Type)
		}
	}
	return b.String()
}
