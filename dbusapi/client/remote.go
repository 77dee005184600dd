package client

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
)

// SSHError says the bus of another host could not be reached over ssh,
// and how to check it.
type SSHError struct {
	Host string
	Err  error
}

func (e *SSHError) Error() string {
	return fmt.Sprintf("cannot reach the bus of %s over ssh: check that \"ssh %s systemd-stdio-bridge\" works (ssh access, systemd on the host)", e.Host, e.Host)
}

func (e *SSHError) Unwrap() error { return e.Err }

// SSHCommand is the command that reaches the bus of host ("[USER@]HOST[:PORT]")
// as systemd's tools do for -H: ssh runs systemd-stdio-bridge there, which
// connects its stdin and stdout to the host's system bus (bus "session":
// the user's bus; an address: that bus).
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
	if name == "" || strings.HasPrefix(name, "-") || (user == "" && strings.Contains(host, "@")) || strings.HasPrefix(user, "-") {
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

// dialSSH connects to the bus of host through ssh and systemd-stdio-bridge.
// The bridge authenticates no one (ssh did): godbus offers ANONYMOUS, and
// no Unix fds pass over the pipe.
func dialSSH(host, bus string) (*dbus.Conn, error) {
	argv, err := SSHCommand(host, bus)
	if err != nil {
		return nil, &SSHError{Host: host, Err: err}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr // ssh's own questions and errors are for the user
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, &SSHError{Host: host, Err: err}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, &SSHError{Host: host, Err: err}
	}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, &SSHError{Host: host, Err: fmt.Errorf("ssh is not installed: %w", err)}
		}
		return nil, &SSHError{Host: host, Err: err}
	}
	pipe := &sshPipe{Reader: out, in: in, cmd: cmd}
	conn, err := dbus.NewConn(pipe)
	if err != nil {
		pipe.Close()
		return nil, &SSHError{Host: host, Err: err}
	}
	if err := conn.Auth([]dbus.Auth{dbus.AuthAnonymous()}); err != nil {
		conn.Close()
		return nil, &SSHError{Host: host, Err: err}
	}
	if err := conn.Hello(); err != nil {
		conn.Close()
		return nil, &SSHError{Host: host, Err: err}
	}
	return conn, nil
}
