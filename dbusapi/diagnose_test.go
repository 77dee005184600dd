package dbusapi

import (
	"reflect"
	"strings"
	"testing"
)

func TestFindingsRoundTripWithStableFieldNames(t *testing.T) {
	fs := []Finding{
		{ID: "port-no-sm", Subject: Subject{Kind: "port", Device: "mlx4_0", Port: 1}, Severity: SeverityFail,
			Finding: "mlx4_0/1: link up but no subnet manager", Fix: "systemctl enable --now opensm"},
		{ID: "ipoib", Subject: Subject{Kind: "netdev", Netdev: "ib0"}, Severity: SeverityOK, Finding: "IPoIB ib0"},
	}
	doc, err := EncodeFindings(fs)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"id": "port-no-sm"`, `"subject": {`, `"kind": "port"`, `"device": "mlx4_0"`, `"port": 1`,
		`"severity": "fail"`, `"finding": `, `"fix": "systemctl enable --now opensm"`, `"netdev": "ib0"`, `"fix": ""`} {
		if !strings.Contains(doc, want) {
			t.Errorf("document lacks %s:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, `"port": 0`) || strings.Contains(doc, `"device": ""`) {
		t.Errorf("empty subject fields must be left out:\n%s", doc)
	}
	back, err := DecodeFindings(doc)
	if err != nil || !reflect.DeepEqual(back, fs) {
		t.Fatalf("round trip = %+v, %v", back, err)
	}
	if CountFailed(back) != 1 {
		t.Errorf("CountFailed = %d", CountFailed(back))
	}
	if doc, _ := EncodeFindings(nil); doc != "[]" {
		t.Errorf("no findings = %q, want []", doc)
	}
}

func TestDecodeFindingsToleratesNewFieldsAndRefusesOtherDocuments(t *testing.T) {
	fs, err := DecodeFindings(`[{"id":"x","subject":{"kind":"host","rack":"r1"},"severity":"warn","finding":"f","fix":"g","since":"2025"}]`)
	if err != nil || len(fs) != 1 || fs[0].Severity != SeverityWarn {
		t.Fatalf("newer document: %+v, %v", fs, err)
	}
	if _, err := DecodeFindings(`{"devices":[]}`); err == nil {
		t.Error("a Describe document decoded as findings")
	}
}
