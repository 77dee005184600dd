package reconcile

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
)

// An entry read from found.json wins over one found since for the same
// setting, also when the memory is at its bound: the bound keeps only new
// settings out.
func TestFoundMergeAtTheBoundKeepsTheFileFirst(t *testing.T) {
	entry := func(dev, value string) *FoundEntry {
		return &FoundEntry{Subject: Subject{Kind: SubjectDevice}, Device: dev, Setting: "vpi_type", Value: json.RawMessage(value), Text: value}
	}
	f := &Found{entries: map[string]*FoundEntry{}, unrestored: map[string]*FoundEntry{}}
	for i := 0; i < MaxFoundEntries; i++ {
		e := entry("pci "+strconv.Itoa(i), `"eth"`)
		f.entries[e.key()] = e
	}
	f.merge(&foundFile{Found: []*FoundEntry{entry("pci 7", `"ib"`), entry("pci new", `"ib"`)}})
	if got := f.entries[entry("pci 7", "").key()]; string(got.Value) != `"ib"` {
		t.Errorf("at the bound, the file's value for a setting found since: %s, want the file's \"ib\"", got.Value)
	}
	if _, ok := f.entries[entry("pci new", "").key()]; ok || len(f.entries) != MaxFoundEntries {
		t.Errorf("a new setting taken beyond the bound: %d entries", len(f.entries))
	}
}

// rdmad(8) quotes the header an operator must put back.
func TestFoundHeaderIsQuotedInTheManPage(t *testing.T) {
	b, err := os.ReadFile("../../docs/rdmad.8")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), strings.TrimSuffix(FoundHeader, "\n")) {
		t.Error("docs/rdmad.8 does not quote FoundHeader as it is")
	}
}
