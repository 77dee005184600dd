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

// The lines of the contract and of the web console that give a range
// outside the table (the RoCE TOS) are what package value makes, and a
// stale one is rewritten.
func TestRangeLinesAreCurrent(t *testing.T) {
	page, err := os.ReadFile("../../../cockpit/index.html")
	if err != nil {
		t.Fatal(err)
	}
	for in, data := range map[string][]byte{"contract": dbusapi.IntrospectionXML, "cockpit": page} {
		want, err := withRangeLines(data, in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, data) {
			t.Errorf("%s: a line of dbusapi.RangeLines is stale: run go generate ./dbusapi", in)
		}
		n := 0
		for _, l := range dbusapi.RangeLines {
			if l.In == in {
				n++
				if !bytes.Contains(data, []byte("\n"+l.Line+"\n")) {
					t.Errorf("%s lacks the line %q", in, l.Line)
				}
			}
		}
		if n == 0 {
			t.Errorf("no range line in %s", in)
		}
	}
	stale := bytes.Replace(dbusapi.IntrospectionXML, []byte("      tos: 0..255,"), []byte("      tos: 0..63,"), 1)
	if bytes.Equal(stale, dbusapi.IntrospectionXML) {
		t.Fatal("the contract has no tos line to spoil")
	}
	if got, err := withRangeLines(stale, "contract"); err != nil || !bytes.Equal(got, dbusapi.IntrospectionXML) {
		t.Errorf("rewriting a stale tos line: %v", err)
	}
}

// The manual pages define the ranges they name from package value, and
// the example configuration's range comments are package value's.
func TestManRangesAndExampleAreCurrent(t *testing.T) {
	for _, page := range []string{"../../../docs/rdmad.toml.5", "../../../docs/rdmactl.8"} {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		want, err := withManRanges(data)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, data) {
			t.Errorf("%s: the ranges' strings are stale: run go generate ./dbusapi", page)
		}
		if !bytes.Contains(data, []byte(`\*[range-`)) {
			t.Errorf("%s names no range", page)
		}
	}
	example, err := os.ReadFile("../../../etc/rdma/rdmad.toml")
	if err != nil {
		t.Fatal(err)
	}
	want, err := withRangeLines(example, "example")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, example) {
		t.Error("etc/rdma/rdmad.toml: a range comment is stale: run go generate ./dbusapi")
	}
	stale := bytes.Replace(want, []byte("# 0..255\n"), []byte("# 0..63\n"), 1)
	if bytes.Equal(stale, want) {
		t.Fatal("the example has no tos comment to spoil")
	}
	if got, err := withRangeLines(stale, "example"); err != nil || !bytes.Equal(got, want) {
		t.Errorf("rewriting a stale tos comment: %v", err)
	}
}
