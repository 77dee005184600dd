package dbusapi

import (
	"bytes"
	"fmt"
	"strings"
)

//go:generate go run ./internal/gendoc org.rdmad1.xml ../cockpit/index.html ../docs/dbus-api.md ../etc/rdma/rdmad.toml ../docs/rdmad.toml.5 ../docs/rdmactl.8

// Markdown renders the contract as the D-Bus API reference
// (docs/dbus-api.md); a test fails when the checked-in file differs.
func (c *Contract) Markdown() []byte {
	var b bytes.Buffer
	b.WriteString("# rdmad D-Bus API (org.rdmad1)\n\n")
	b.WriteString("<!-- Generated from dbusapi/org.rdmad1.xml by `go generate ./dbusapi`; do not edit. -->\n\n")
	b.WriteString(c.Doc + "\n")
	for _, i := range c.Interfaces {
		fmt.Fprintf(&b, "\n## %s\n\n%s\n", i.Name, docBody(i.Doc, i.Name))
		for _, kind := range []struct{ name, heading string }{{"method", "Methods"}, {"property", "Properties"}, {"signal", "Signals"}} {
			first := true
			for _, m := range i.Members {
				if m.Kind != kind.name {
					continue
				}
				if first {
					fmt.Fprintf(&b, "\n### %s\n", kind.heading)
					first = false
				}
				fmt.Fprintf(&b, "\n#### `%s`\n\n", signature(m))
				b.WriteString(docBody(m.Doc, m.Name) + "\n")
			}
		}
	}
	return b.Bytes()
}

func signature(m Member) string {
	if m.Kind == "property" {
		return fmt.Sprintf("%s %s (%s)", m.Name, m.Type, m.Access)
	}
	var in, out []string
	for _, a := range m.Args {
		if a.Direction == "out" {
			out = append(out, a.Type+" "+a.Name)
		} else {
			in = append(in, a.Type+" "+a.Name)
		}
	}
	s := fmt.Sprintf("%s(%s)", m.Name, strings.Join(in, ", "))
	if len(out) > 0 {
		s += " -> (" + strings.Join(out, ", ") + ")"
	}
	return s
}

// docBody drops the "Name:" lead-in of a comment.
func docBody(doc, name string) string {
	doc = strings.TrimPrefix(doc, name+":")
	return strings.TrimSpace(doc)
}
