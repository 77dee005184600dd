package bus

import (
	"encoding/xml"

	"github.com/godbus/dbus/v5/introspect"
)

func xmlMarshal(n introspect.Node) (string, error) {
	b, err := xml.MarshalIndent(n, "", "  ")
	if err != nil {
		return "", err
	}
	return introspect.IntrospectDeclarationString + string(b), nil
}
