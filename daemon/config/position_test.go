package config

import (
	"strconv"
	"testing"
	"unsafe"
)

// A position's text is made once and shared by every record and action
// that names it; the table of texts stays bounded.
func TestPositionTextIsShared(t *testing.T) {
	p := Position{File: "/etc/rdma/rdmad.toml", Line: 12}
	a, b := p.String(), Position{File: "/etc/rdma/rdmad.toml", Line: 12}.String()
	if a != "/etc/rdma/rdmad.toml:12" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Errorf("%q and %q: not one shared text", a, b)
	}
	if s := (Position{File: "runtime"}).String(); s != "runtime" {
		t.Errorf("no line: %q", s)
	}
	for i := 1; i <= 2*maxPositionTexts; i++ {
		if s, want := (Position{File: "f", Line: i}).String(), "f:"+strconv.Itoa(i); s != want {
			t.Fatalf("%q, want %q", s, want)
		}
	}
	positionTexts.mu.Lock()
	n := len(positionTexts.m)
	positionTexts.mu.Unlock()
	if n > maxPositionTexts {
		t.Errorf("%d texts kept, bound %d", n, maxPositionTexts)
	}
}
