package dbusapi

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strings"

	"github.com/godbus/dbus/v5/introspect"
)

// Member is one documented member of the contract.
type Member struct {
	Kind   string // "method", "property", "signal"
	Name   string
	Doc    string
	Args   []introspect.Arg // methods and signals
	Type   string           // properties
	Access string           // properties
}

// Interface is one interface of the contract with its documentation.
type Interface struct {
	Name    string
	Doc     string
	Members []Member
}

// Contract is the parsed introspection XML.
type Contract struct {
	Doc        string // the file's leading comment
	Interfaces []Interface
}

// ParseContract reads introspection XML, attaching each comment to the
// element that follows it, as NetworkManager's introspection files are read.
func ParseContract(data []byte) (*Contract, error) {
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = true
	c := &Contract{}
	var pending string
	var iface *Interface
	var member *Member
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() == "EOF" {
				break
			}
			line, _ := dec.InputPos()
			return nil, fmt.Errorf("D-Bus contract, line %d: %w", line, err)
		}
		switch t := tok.(type) {
		case xml.Comment:
			pending = cleanDoc(string(t))
		case xml.StartElement:
			attr := func(n string) string {
				for _, a := range t.Attr {
					if a.Name.Local == n {
						return a.Value
					}
				}
				return ""
			}
			switch t.Name.Local {
			case "node":
				if c.Doc == "" {
					c.Doc = pending
				}
			case "interface":
				c.Interfaces = append(c.Interfaces, Interface{Name: attr("name"), Doc: pending})
				iface = &c.Interfaces[len(c.Interfaces)-1]
			case "method", "signal", "property":
				if iface == nil {
					return nil, fmt.Errorf("D-Bus contract: %s %q outside an interface", t.Name.Local, attr("name"))
				}
				iface.Members = append(iface.Members, Member{Kind: t.Name.Local, Name: attr("name"), Doc: pending,
					Type: attr("type"), Access: attr("access")})
				member = &iface.Members[len(iface.Members)-1]
			case "arg":
				if member == nil {
					return nil, fmt.Errorf("D-Bus contract: arg %q outside a method or signal", attr("name"))
				}
				member.Args = append(member.Args, introspect.Arg{Name: attr("name"), Type: attr("type"), Direction: attr("direction")})
			}
			pending = ""
		case xml.EndElement:
			switch t.Name.Local {
			case "method", "signal", "property":
				member = nil
			case "interface":
				iface = nil
			}
		}
	}
	return c, nil
}

// Interface returns the named interface, or nil.
func (c *Contract) Interface(name string) *Interface {
	for i := range c.Interfaces {
		if c.Interfaces[i].Name == name {
			return &c.Interfaces[i]
		}
	}
	return nil
}

// Member returns the named member of kind, or nil.
func (i *Interface) Member(kind, name string) *Member {
	for k := range i.Members {
		if i.Members[k].Kind == kind && i.Members[k].Name == name {
			return &i.Members[k]
		}
	}
	return nil
}

// cleanDoc removes the comment's indentation, keeping paragraph breaks.
func cleanDoc(s string) string {
	lines := strings.Split(strings.Trim(s, "\n"), "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " \t"))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			lines[i] = l[indent:]
		}
		lines[i] = strings.TrimRight(lines[i], " \t")
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}

var contract = func() *Contract {
	c, err := ParseContract(IntrospectionXML)
	if err != nil {
		panic(err) // the embedded file is checked by the tests
	}
	return c
}()

// TheContract is the parsed embedded org.rdmad1.xml.
func TheContract() *Contract { return contract }
