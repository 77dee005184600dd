package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

// failure is an error rdmactl itself words for the user.
type failure struct{ msg string }

func (f *failure) Error() string { return f.msg }

func failf(format string, args ...any) error { return &failure{fmt.Sprintf(format, args...)} }

// timeoutError: rdmad did not answer a call in time.
type timeoutError struct {
	after time.Duration
	where string
}

func (e *timeoutError) Error() string {
	where := "rdmad"
	if e.where != "" {
		where += " " + e.where
	}
	return fmt.Sprintf("%s did not answer within %s: it may be stuck; see systemctl status rdmad and journalctl -u rdmad", where, e.after)
}

// documentError: rdmad answered with a document rdmactl cannot read.
type documentError struct {
	what string
	err  error
}

func (e *documentError) Error() string {
	return fmt.Sprintf("rdmad's %s answer is not a document this rdmactl reads (is org.rdmad1 owned by an rdmad of the same version? see rdmactl --version and rdmactl status)", e.what)
}

func (e *documentError) Unwrap() error { return e.err }

// describeError is the sentence rdmactl prints for err: what went wrong
// and what to do, its control characters escaped. Internal error text
// (Go's, godbus's) is not shown.
func describeError(err error) string {
	name, msg := client.ErrorName(err), client.ErrorMessage(err)
	if name == dbusapi.ErrConfig {
		// One error per line, file:line first (rdmad escapes newlines).
		return "configuration error, the policy in force stays (rdmactl status says which):\n  " + indentLines(msg, "  ")
	}
	return escapeText(sentence(err))
}

// indentLines escapes a message of several lines for a terminal: each line
// on its own (rdmad publishes a newline as \x0a), indented after the first.
func indentLines(s, indent string) string {
	lines := strings.Split(strings.ReplaceAll(s, `\x0a`, "\n"), "\n")
	for i := range lines {
		lines[i] = escapeText(lines[i])
	}
	return strings.Join(lines, "\n"+indent)
}

func sentence(err error) string {
	var te *timeoutError
	var de *documentError
	var be *client.BusError
	var se *client.SSHError
	var f *failure
	switch {
	case errors.As(err, &f):
		return f.msg
	case errors.As(err, &te):
		return te.Error()
	case errors.As(err, &de):
		return de.Error()
	case errors.As(err, &se):
		return se.Error()
	case errors.Is(err, client.ErrNotRunning):
		return err.Error()
	case errors.As(err, &be):
		return be.Error()
	}
	name, msg := client.ErrorName(err), client.ErrorMessage(err)
	switch {
	case name == dbusapi.ErrNotAllowed:
		return "not allowed on this host: " + msg + " (rdmactl ... unset still withdraws what was set over D-Bus)"
	case name == dbusapi.ErrAccessDenied:
		return "access denied: " + msg + " (run it as root, or ask for the polkit action in rdmactl(8))"
	case name == dbusapi.ErrBusy:
		return "rdmad is busy: " + msg
	case name == dbusapi.ErrInvalidArgs, strings.HasPrefix(name, "org.rdmad1.Error."):
		return msg
	case name == "org.freedesktop.DBus.Error.ServiceUnknown", name == "org.freedesktop.DBus.Error.NameHasNoOwner",
		name == "org.freedesktop.DBus.Error.Disconnected":
		return "rdmad went away while rdmactl was talking to it: see systemctl status rdmad"
	case name == "org.freedesktop.DBus.Error.NoReply", name == "org.freedesktop.DBus.Error.Timeout":
		return "rdmad did not answer: it may be stuck; see systemctl status rdmad and journalctl -u rdmad"
	case name == "org.freedesktop.DBus.Error.UnknownMethod", name == "org.freedesktop.DBus.Error.UnknownInterface",
		name == "org.freedesktop.DBus.Error.UnknownObject", name == "org.freedesktop.DBus.Error.UnknownProperty":
		return "this rdmad does not have what rdmactl asked for (" + msg + "): it is older than rdmactl; upgrade rdmad and restart it"
	case name != "":
		return name + ": " + msg
	}
	return "the connection to rdmad failed: see systemctl status rdmad (and, with -H, that ssh to the host works)"
}
