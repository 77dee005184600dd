package bus

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/audit"
	"github.com/rdmad/rdmad/dbusapi"
)

// identifyTimeout bounds the bus's answer about a caller: the bus driver
// answers at once; a bus that does not must not hold a call.
const identifyTimeout = 5 * time.Second

// identify names the caller of a call (accepted or refused): what the bus
// authenticated (GetConnectionCredentials: the uid, the pid and, where
// the bus offers it, ProcessFD, a pidfd that pins the process), the uid's
// name in the host's /etc/passwd, and the command and systemd unit of the
// process (audit.Proc). It never fails: what it cannot tell stays empty,
// and the bus name is always there.
func (s *Server) identify(sender string) audit.Caller {
	c := audit.Caller{Name: sender}
	conn := s.conn.Load()
	if conn == nil || sender == "" {
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), identifyTimeout)
	defer cancel()
	var creds map[string]dbus.Variant
	err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionCredentials", 0, sender).Store(&creds)
	pidfd := -1
	for key, v := range creds {
		// Every descriptor the bus passed is this process's now: close
		// them all, keeping ProcessFD open until the process is read.
		if fd, ok := v.Value().(dbus.UnixFD); ok {
			if key == "ProcessFD" && pidfd < 0 {
				pidfd = int(fd)
			}
			defer unix.Close(int(fd))
		}
	}
	if err != nil {
		return c
	}
	if uid, ok := creds["UnixUserID"].Value().(uint32); ok {
		c.UID, c.HasUID = uid, true
		if h := s.svc.Host(); h != nil {
			c.User = audit.UserName(h, uid)
		}
	}
	if pid, ok := creds["ProcessID"].Value().(uint32); ok {
		c.PID = pid
	}
	s.proc.Fill(&c, pidfd)
	return c
}

// maxArgsText bounds the arguments an audit line shows: a call's
// arguments are validated before it is accepted, but a SetQoSSettings
// with every key is long.
const maxArgsText = 1024

// argsText is a call's arguments as its audit line shows them, named as
// the contract names them: `device=mlx5_0 port=1 mode=v2 tos=106
// persist=true`.
func argsText(method string, body []any) string {
	names := inArgNames[method]
	var b strings.Builder
	for i, v := range body {
		if i > 0 {
			b.WriteByte(' ')
		}
		if i < len(names) {
			b.WriteString(names[i] + "=")
		}
		b.WriteString(argText(v))
		if b.Len() > maxArgsText {
			return b.String()[:maxArgsText] + "..."
		}
	}
	return b.String()
}

// argText is one argument: a string as it is when that reads as one word
// of printable text, else quoted (a caller's bytes, escaped); arrays of
// bytes as numbers, a{sv} by sorted key.
func argText(v any) string {
	switch x := v.(type) {
	case string:
		if x == "" || strings.ContainsAny(x, " \"'=\\{}[]") || strings.IndexFunc(x, func(r rune) bool { return !unicode.IsGraphic(r) || r == utf8.RuneError }) >= 0 {
			return strconv.Quote(x)
		}
		return x
	case []byte:
		return fmt.Sprint([]uint8(x))
	case dbus.Variant:
		return argText(x.Value())
	case map[string]dbus.Variant:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = dbusapi.Escape(k) + "=" + argText(x[k])
		}
		return "{" + strings.Join(parts, " ") + "}"
	}
	return fmt.Sprint(v)
}

// inArgNames are the names of the Manager's methods' in arguments in the
// contract.
var inArgNames = func() map[string][]string {
	out := map[string][]string{}
	for _, mb := range dbusapi.TheContract().Interface(dbusapi.ManagerIface).Members {
		if mb.Kind != "method" {
			continue
		}
		for _, a := range mb.Args {
			if a.Direction != "out" {
				out[mb.Name] = append(out[mb.Name], a.Name)
			}
		}
	}
	return out
}()

// audit logs an accepted mutating call once, at notice level, with its
// caller, method and arguments, and returns the context the call runs
// in: the log lines of what it causes (a pass's "applied" lines) name the
// same caller.
func (s *Server) audit(msg dbus.Message, method string) context.Context {
	sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
	c := s.identify(sender)
	attrs := append(c.Attrs(), audit.KeyMethod, method)
	if len(msg.Body) > 0 {
		attrs = append(attrs, audit.KeyArgs, argsText(method, msg.Body))
	}
	s.log.Log(context.Background(), audit.LevelNotice, "call accepted", attrs...)
	return audit.With(context.Background(), c)
}
