package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rdmad/rdmad/dbusapi"
)

// STATUS= is one line of valid UTF-8 whatever the host put in the text,
// carries it whole when short (escaped: nothing is lost) and a bounded
// part of it when long, never cutting a character in two.
func TestStatusAssignmentIsOneLine(t *testing.T) {
	long := strings.Repeat("é", 2000) // 4,000 bytes of two-byte characters
	for _, text := range []string{
		"2 RDMA devices; last reconcile: ok",
		"failed: serve the objects on the system bus: device \"vf\xff\n0\"\nREADY=1",
		"not started: lock /run/x\r\nMAINPID=1\x00",
		"x" + long,
		strings.Repeat("\n", 1<<20),
	} {
		got := statusAssignment(text)
		value, ok := strings.CutPrefix(got, "STATUS=")
		if !ok || strings.ContainsAny(got, "\n\r\x00") || !utf8.ValidString(got) {
			t.Errorf("statusAssignment(%.40q) = %.80q: not one STATUS= line of UTF-8", text, got)
			continue
		}
		if len(got) > 7+4*maxStatusText+3 {
			t.Errorf("statusAssignment(%.40q) is %d bytes long", text, len(got))
		}
		if len(text) <= maxStatusText {
			if back := dbusapi.Unescape(value); back != text {
				t.Errorf("statusAssignment(%q) = %q, which unescapes to %q", text, got, back)
			}
			continue
		}
		head := dbusapi.Unescape(strings.TrimSuffix(value, "..."))
		if !strings.HasSuffix(value, "...") || !strings.HasPrefix(text, head) || len(head) < maxStatusText-utf8.UTFMax {
			t.Errorf("a %d-byte text became %.80q...", len(text), got)
		}
		if strings.Contains(value, `\x`) && text[0] == 'x' {
			t.Errorf("the cut split a character: %q", value[len(value)-10:])
		}
	}
}

// What systemd receives on NOTIFY_SOCKET for a status text with newlines
// is one STATUS= assignment: the text cannot add READY=1 or MAINPID=.
func TestNotifyStatusSendsOneAssignment(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	notifyStatus("failed: serve the objects on the system bus: device \"vf0\nREADY=1\nMAINPID=1\"")
	buf := make([]byte, 8192)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n")
	want := `STATUS=failed: serve the objects on the system bus: device "vf0\x0aREADY=1\x0aMAINPID=1"`
	if len(got) != 1 || got[0] != want {
		t.Errorf("notify datagram lines %q, want [%q]", got, want)
	}
}
