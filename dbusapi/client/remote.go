package client

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/godbus/dbus/v5"

	"github.com/rdmad/rdmad/dbusapi"
)

// SSHError says the bus of another host could not be reached over ssh,
// and how to check it: with the command rdmactl ran (Argv), quoted for a
// shell, so what the user pastes is what failed.
type SSHError struct {
	Host string
	Argv []string // the ssh command run; nil when -H named no host
	Err  error
}

func (e *SSHError) Error() string {
	if e.Argv == nil {
		return fmt.Sprintf("cannot reach the bus of %s over ssh: %v", e.Host, e.Err)
	}
	return fmt.Sprintf("cannot reach the bus of %s over ssh: check that %s works (ssh access, systemd on the host)", e.Host, shellQuote(e.Argv))
}

func (e *SSHError) Unwrap() error { return e.Err }

// SSHCommand is the command that reaches the bus of host ("[USER@]HOST[:PORT]")
// as systemd's tools do for -H: ssh runs systemd-stdio-bridge there, which
// connects its stdin and stdout to the host's system bus (bus "session":
// the user's bus; an address: that bus). HOST is a host name or address
// (letters, digits, '.', '-', '_', ':' and '%' for IPv6); USER has no blank
// and no character that acts on a terminal.
func SSHCommand(host, bus string) ([]string, error) {
	user, hostport := "", host
	if i := strings.LastIndex(host, "@"); i >= 0 {
		user, hostport = host[:i], host[i+1:]
	}
	name, port := hostport, ""
	switch {
	case strings.HasPrefix(hostport, "["): // [IPv6]:PORT
		end := strings.Index(hostport, "]")
		if end < 0 {
			return nil, fmt.Errorf("-H %q: no ] after the IPv6 address", host)
		}
		name, port = hostport[1:end], strings.TrimPrefix(hostport[end+1:], ":")
	case strings.Count(hostport, ":") == 1:
		name, port, _ = strings.Cut(hostport, ":")
	}
	if !validHostName(name) || (user == "" && strings.Contains(host, "@")) || !validUserName(user) {
		return nil, fmt.Errorf("-H %q: want [USER@]HOST[:PORT]", host)
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return nil, fmt.Errorf("-H %q: the port must be a number", host)
		}
	}
	argv := []string{"ssh", "-xT"}
	if user != "" {
		argv = append(argv, "-l", user)
	}
	if port != "" {
		argv = append(argv, "-p", port)
	}
	argv = append(argv, "--", name, "systemd-stdio-bridge")
	switch {
	case bus == "session":
		argv = append(argv, "--user")
	case bus != "" && bus != "system":
		// ssh hands the words to the remote shell: quote the address.
		argv = append(argv, "'--bus-path="+strings.ReplaceAll(bus, "'", `'\''`)+"'")
	}
	return argv, nil
}

// validHostName: a host name, IPv4 or IPv6 address (with a zone), never an
// option.
func validHostName(name string) bool {
	if name == "" || name[0] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(".-_:%", c) >= 0) {
			return false
		}
	}
	return true
}

// validUserName: no option, no blank, nothing a terminal acts on.
func validUserName(user string) bool {
	if strings.HasPrefix(user, "-") || !utf8.ValidString(user) {
		return false
	}
	for _, r := range user {
		if unicode.IsSpace(r) || dbusapi.Hidden(r) {
			return false
		}
	}
	return true
}

// shellQuote renders argv as a shell command line: words with anything
// but letters, digits and -_./:=@% single-quoted.
func shellQuote(argv []string) string {
	words := make([]string, len(argv))
	for i, w := range argv {
		plain := w != ""
		for j := 0; j < len(w) && plain; j++ {
			c := w[j]
			plain = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_./:=@%,+", c) >= 0
		}
		if plain {
			words[i] = w
		} else {
			words[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
	}
	return strings.Join(words, " ")
}

// sshPipe is the ssh process as the connection's stream.
type sshPipe struct {
	io.Reader
	in  io.WriteCloser
	cmd *exec.Cmd
}

func (p *sshPipe) Write(b []byte) (int, error) { return p.in.Write(b) }

// Close ends the session: ssh sees the end of its input and exits; one
// that does not within a second is killed.
func (p *sshPipe) Close() error {
	err := p.in.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
	return err
}

// dialSSH connects to the bus of t.Host through ssh and
// systemd-stdio-bridge, all before deadline (openBus). The bridge
// authenticates no one (ssh did): godbus offers ANONYMOUS, and no Unix fds
// pass over the pipe. What ssh and the remote side write to stderr reaches
// t.Stderr escaped as everything rdmactl prints.
func dialSSH(t Target, deadline time.Time) (*dbus.Conn, error) {
	host := t.Host
	argv, err := SSHCommand(host, t.Bus)
	if err != nil {
		return nil, &SSHError{Host: host, Err: err}
	}
	stderr := t.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	fail := func(err error) error { return &SSHError{Host: host, Argv: argv, Err: err} }
	cmd := exec.Command(argv[0], argv[1:]...)
	esc := &displayWriter{w: stderr}
	cmd.Stderr = esc // ssh's own questions and errors are for the user
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, fail(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fail(err)
	}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, fail(fmt.Errorf("ssh is not installed: %w", err))
		}
		return nil, fail(err)
	}
	pipe := &sshPipe{Reader: out, in: in, cmd: cmd}
	conn, err := openBus(pipe, []dbus.Auth{dbus.AuthAnonymous()}, deadline)
	if err != nil {
		// openBus closed the pipe, which waits for ssh: its stderr is
		// all written; what is held (a last "\r") goes out before
		// rdmactl's own line.
		esc.Flush()
		return nil, fail(err)
	}
	return conn, nil
}

// displayWriter passes text to w with every character that acts on a
// terminal escaped (dbusapi.Hidden, bytes that are not UTF-8), as rdmactl
// prints everything: only line ends and tabs pass, and ssh's "\r\n" line
// ends become "\n". A character or "\r" split across writes is held
// until the next one.
type displayWriter struct {
	mu   sync.Mutex
	w    io.Writer
	held []byte
}

func (d *displayWriter) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	data := append(d.held, p...)
	d.held = nil
	var b strings.Builder
	const hex = "0123456789abcdef"
	for i := 0; i < len(data); {
		c := data[i]
		if c == '\r' && i+1 == len(data) {
			d.held = append(d.held, c)
			break
		}
		if c >= utf8.RuneSelf && !utf8.FullRune(data[i:]) {
			d.held = append(d.held, data[i:]...)
			break
		}
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case c == '\r' && data[i+1] == '\n':
		case c == '\n' || c == '\t':
			b.WriteByte(c)
		case (r == utf8.RuneError && size == 1) || dbusapi.Hidden(r):
			for _, x := range data[i : i+size] {
				b.WriteString(`\x`)
				b.WriteByte(hex[x>>4])
				b.WriteByte(hex[x&0xf])
			}
		default:
			b.Write(data[i : i+size])
		}
		i += size
	}
	if _, err := io.WriteString(d.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what is held (an incomplete character, a last "\r")
// escaped.
func (d *displayWriter) Flush() {
	d.mu.Lock()
	held := d.held
	d.held = nil
	d.mu.Unlock()
	if len(held) == 0 {
		return
	}
	var b strings.Builder
	for _, x := range held {
		fmt.Fprintf(&b, `\x%02x`, x)
	}
	_, _ = io.WriteString(d.w, b.String())
}
