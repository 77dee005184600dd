package dbusapi

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The errors of Dial name the bus as a user gave it and the step that
// failed, and keep the cause for errors.Is.
func TestDialErrorsNameTheBusAndTheStep(t *testing.T) {
	missing := "unix:path=" + filepath.Join(t.TempDir(), "no-bus")
	_, err := Dial(missing)
	if err == nil || !strings.HasPrefix(err.Error(), "connect to the bus at "+missing+": ") || !errors.Is(err, syscall.ENOENT) {
		t.Errorf("Dial(%q) = %v, want \"connect to the bus at %s: ...\" wrapping ENOENT", missing, err, missing)
	}
	_, err = Dial("sytem")
	if want := `bus "sytem": want system, session or an address like unix:path=/run/bus`; err == nil || err.Error() != want {
		t.Errorf("Dial(\"sytem\") = %v, want %q", err, want)
	}
}

func TestDescribeBus(t *testing.T) {
	for bus, want := range map[string]string{
		"system":            "the system bus",
		"session":           "the session bus",
		"unix:path=/run/x":  "the bus at unix:path=/run/x",
		"tcp:host=h,port=1": "the bus at tcp:host=h,port=1",
	} {
		if got := DescribeBus(bus); got != want {
			t.Errorf("DescribeBus(%q) = %q, want %q", bus, got, want)
		}
	}
}
