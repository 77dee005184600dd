package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/dbusapi"
)

// The contract's settings paragraph of SetQoSSettings is what the table
// of keys makes: run go generate ./dbusapi after changing the table.
func TestContractSettingsAreCurrent(t *testing.T) {
	want, err := withSettingsDoc(dbusapi.IntrospectionXML)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, dbusapi.IntrospectionXML) {
		t.Error("dbusapi/org.rdmad1.xml: SetQoSSettings' settings paragraph is stale: run go generate ./dbusapi")
	}
	doc := dbusapi.TheContract().Interface(dbusapi.ManagerIface).Member("method", "SetQoSSettings").Doc
	for _, k := range dbusapi.QoSKeys {
		if !strings.Contains(doc, fmt.Sprintf("- %q %s: ", k.Name, k.Type)) {
			t.Errorf("SetQoSSettings' documentation lacks %q %s", k.Name, k.Type)
		}
	}
}

// The web console's lossless form is what the table of keys makes, a
// field for each key with a label, named by its key and type.
func TestCockpitFormIsCurrent(t *testing.T) {
	page, err := os.ReadFile("../../../cockpit/index.html")
	if err != nil {
		t.Fatal(err)
	}
	want, err := withQoSForm(page)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, page) {
		t.Error("cockpit/index.html: the lossless form's fields are stale: run go generate ./dbusapi")
	}
	fields := 0
	for _, k := range dbusapi.QoSKeys {
		if k.Form == "" {
			continue
		}
		fields++
		if !strings.Contains(string(page), fmt.Sprintf(`data-key=%q data-type=%q`, k.Name, k.Type)) {
			t.Errorf("cockpit/index.html has no field for %s", k.Name)
		}
	}
	if fields == 0 || strings.Contains(QoSForm(dbusapi.QoSKeys), "the form has no field") {
		t.Errorf("the form offers %d keys, or one it cannot show:\n%s", fields, QoSForm(dbusapi.QoSKeys))
	}
}

// A stale paragraph is rewritten, and only it.
func TestRewriteReplacesOnlyTheGeneratedLines(t *testing.T) {
	stale := bytes.Replace(dbusapi.IntrospectionXML, []byte(`- "pause" b:`), []byte(`- "pause" s:`), 1)
	if bytes.Equal(stale, dbusapi.IntrospectionXML) {
		t.Fatal("the contract has no pause line to spoil")
	}
	got, err := withSettingsDoc(stale)
	if err != nil || !bytes.Equal(got, dbusapi.IntrospectionXML) {
		t.Errorf("rewriting a stale contract: %v", err)
	}
	if _, err := withSettingsDoc([]byte("<node/>")); err == nil {
		t.Error("a contract without SetQoSSettings was rewritten")
	}
}
