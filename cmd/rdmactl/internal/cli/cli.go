// Package cli is rdmactl: one command tree (spf13/cobra) with per-command
// help, output as text tables or JSON, and exit codes (0 ok, 1 failure,
// 2 usage).
//
// Adding a command is one file: it registers a builder for its parent in an
// init function,
//
//	func init() { register("qos", qosShowCommand) }
//
// where the parent is "" for a top-level command or the name of a group
// ("device", "roce", "qos", "link", "netns"), itself registered with
// register("", groupCommand(...)).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/rdmad/rdmad/daemon/version"
	"github.com/rdmad/rdmad/dbusapi/client"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// Timeouts of a call to rdmad. A read answers at once or rdmad is stuck:
// 25 s is D-Bus's (and sd-bus's) default method timeout. A change may wait
// for a polkit agent asking for a password, and a reconcile may run long.
const (
	ReadTimeout   = 25 * time.Second
	ChangeTimeout = 5 * time.Minute
)

// usageError is a wrong command line: rdmactl prints it in one line, points
// at the command's --help, and exits 2.
type usageError struct {
	cmd *cobra.Command
	msg string
}

func (e *usageError) Error() string { return e.msg }

func usagef(cmd *cobra.Command, format string, args ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, args...)}
}

// silentFailure exits 1 after the command said all there was to say
// (doctor's failing findings, a reload that did not apply).
type silentFailure struct{}

func (silentFailure) Error() string { return "failed" }

type env struct {
	stdout, stderr io.Writer
	stdin          io.Reader // answers to rdmactl's questions
	// terminal: standard input is a terminal, so rdmactl may ask before a
	// call that interrupts traffic.
	terminal bool

	bus, host         string // --bus, -H
	output            string // -o text|json
	jsonFlag          string // -j/--json[=short|pretty]
	noLegend, noPager bool
	noAsk             bool
	interactive       bool

	loc                        *time.Location // times are shown in it (local time)
	now                        func() time.Time
	readTimeout, changeTimeout time.Duration
	connect                    func(t client.Target) (*client.Client, error)
}

func newEnv(stdout, stderr io.Writer) *env {
	e := &env{stdout: stdout, stderr: stderr, stdin: os.Stdin, bus: "system", output: "text", loc: time.Local, now: time.Now,
		readTimeout: ReadTimeout, changeTimeout: ChangeTimeout, connect: client.ConnectTarget}
	if _, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), unix.TCGETS); err == nil {
		// A terminal (not /dev/null, also a character device): a polkit
		// agent on it may ask for a password, and rdmactl may ask before
		// a call that interrupts traffic.
		e.interactive, e.terminal = true, true
	}
	return e
}

// Main runs rdmactl with args (without the program name).
func Main(args []string, stdout, stderr io.Writer) int {
	return newEnv(stdout, stderr).run(args)
}

func (e *env) run(args []string) int {
	root := e.tree()
	root.SetArgs(args)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	return e.exit(root.Execute())
}

// exit prints err as rdmactl's users read it and returns the exit code.
func (e *env) exit(err error) int {
	var ue *usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue):
		path := "rdmactl"
		if ue.cmd != nil {
			path = ue.cmd.CommandPath()
		}
		fmt.Fprintf(e.stderr, "%s: %s\nSee '%s --help'.\n", path, escapeText(ue.msg), path)
		return ExitUsage
	case errors.Is(err, silentFailure{}):
		return ExitFailure
	}
	fmt.Fprintf(e.stderr, "rdmactl: %s\n", describeError(err))
	return ExitFailure
}

// builder makes one command of the tree; it sees the flags through e.
type builder func(e *env) *cobra.Command

type entry struct {
	parent string
	build  builder
}

var registry []entry

// register adds a command under parent ("" for the top level, or a
// group's name).
func register(parent string, b builder) { registry = append(registry, entry{parent, b}) }

// tree builds the whole command tree: the root with its global flags,
// then every registered command under its parent.
func (e *env) tree() *cobra.Command {
	root := &cobra.Command{
		Use:   "rdmactl [OPTIONS] [COMMAND]",
		Short: "Show and change the RDMA policy that rdmad applies",
		Long: `rdmactl shows and changes what rdmad manages (RDMA devices and ports, RoCE
mode and TOS, soft RDMA links, the RDMA netns mode) over D-Bus. Without a
command it runs "status".`,
		Version:       version.Version,
		Args:          noArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE:          func(cmd *cobra.Command, _ []string) error { return e.status(cmd) },
	}
	root.DisableFlagsInUseLine = true
	root.SuggestionsMinimumDistance = 2
	root.SetVersionTemplate("rdmactl {{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	root.SetHelpCommand(helpCommand())
	e.globalFlags(root)

	built := map[string]*cobra.Command{"": root}
	var pending []struct {
		parent string
		cmd    *cobra.Command
	}
	for _, r := range registry {
		c := r.build(e)
		if c.Args == nil {
			c.Args = noArgs
		}
		if r.parent == "" {
			built[c.Name()] = c
		}
		pending = append(pending, struct {
			parent string
			cmd    *cobra.Command
		}{r.parent, c})
	}
	for _, p := range pending {
		p.cmd.DisableFlagsInUseLine = true
		p.cmd.SuggestionsMinimumDistance = 2
		parent, ok := built[p.parent]
		if !ok {
			panic("rdmactl: command " + p.cmd.Name() + " registered under unknown group " + p.parent)
		}
		parent.AddCommand(p.cmd)
	}
	return root
}

// helpCommand is `rdmactl help [COMMAND]`: the command's help, or a usage
// error for a command that does not exist (cobra's own prints the whole
// help and exits 0).
func helpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND]",
		Short: "Help about any command",
		Args:  cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			target, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return usagef(c, "unknown command %q", strings.Join(args, " "))
			}
			return target.Help()
		},
		ValidArgsFunction: func(c *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			target, _, err := c.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []string
			for _, s := range target.Commands() {
				if s.IsAvailableCommand() {
					names = append(names, s.Name())
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
	}
}

// flagError words a flag pflag could not parse without its Go error text
// (strconv's "invalid syntax").
func flagError(c *cobra.Command, err error) error {
	var ive *pflag.InvalidValueError
	if errors.As(err, &ive) {
		want := ive.GetFlag().Value.Type()
		switch want {
		case "int":
			want = "a number"
		case "bool":
			want = "true or false"
		}
		return usagef(c, "--%s %q: want %s", ive.GetFlag().Name, ive.GetValue(), want)
	}
	return usagef(c, "%s", err)
}

// noArgs refuses positional arguments; on a command with subcommands the
// first one is an unknown command.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.HasSubCommands() {
		msg := fmt.Sprintf("unknown command %q", args[0])
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf(" (did you mean %q?)", s[0])
		}
		return &usageError{cmd: cmd, msg: msg}
	}
	return usagef(cmd, "unexpected argument %q", args[0])
}

// exactArgs wants n positional arguments, named in what ("DEV", "NAME").
func exactArgs(what string) cobra.PositionalArgs {
	n := len(strings.Fields(what))
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) < n:
			return usagef(cmd, "missing %s", what)
		case len(args) > n:
			return usagef(cmd, "unexpected argument %q", args[n])
		}
		return nil
	}
}

// groupCommand is a command that groups others (`rdmactl roce`); run alone
// it runs its default one, as `ip link` shows links.
func groupCommand(name, short, def string) builder {
	return func(e *env) *cobra.Command {
		g := &cobra.Command{Use: name + " COMMAND", Short: short, Args: noArgs}
		g.Long = short + ". Without a command: " + name + " " + def + "."
		g.RunE = func(cmd *cobra.Command, args []string) error {
			for _, c := range cmd.Commands() {
				if c.Name() == def {
					return c.RunE(c, nil)
				}
			}
			return usagef(cmd, "missing command")
		}
		return g
	}
}

func (e *env) globalFlags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&e.bus, "bus", "system", "D-Bus bus: system, session or an address (unix:path=...)")
	f.StringVarP(&e.host, "host", "H", "", "run the command on `[USER@]HOST[:PORT]`'s rdmad, over ssh")
	f.StringVarP(&e.output, "output", "o", "text", "output `FORMAT`: text or json")
	f.StringVarP(&e.jsonFlag, "json", "j", "", "print JSON: short (one line, the default of -j) or pretty")
	f.Lookup("json").NoOptDefVal = "short"
	f.BoolVar(&e.noLegend, "no-legend", false, "print no column headers and no footer")
	f.BoolVar(&e.noPager, "no-pager", false, "has no effect: rdmactl never starts a pager (accepted as systemd tools accept it)")
	f.BoolVar(&e.noAsk, "no-ask-password", false, "do not let polkit ask for a password")
	root.Flags().BoolP("version", "", false, "print rdmactl's version")
	_ = root.RegisterFlagCompletionFunc("output", fixed("text", "json"))
	_ = root.RegisterFlagCompletionFunc("json", fixed("short", "pretty"))
	_ = root.RegisterFlagCompletionFunc("bus", fixed("system", "session"))
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return e.checkGlobals(cmd) }
}

func (e *env) checkGlobals(cmd *cobra.Command) error {
	if e.output != "text" && e.output != "json" {
		return usagef(cmd, "-o %q: want text or json", e.output)
	}
	if cmd.Flags().Changed("json") && e.jsonFlag != "short" && e.jsonFlag != "pretty" {
		return usagef(cmd, "--json=%q: want short or pretty", e.jsonFlag)
	}
	if e.bus == "" {
		return usagef(cmd, "--bus needs a value: system, session or an address")
	}
	if e.host != "" {
		if _, err := client.SSHCommand(e.host, e.bus); err != nil {
			return usagef(cmd, "%s", err)
		}
	}
	if e.noAsk {
		e.interactive = false
	}
	return nil
}

// jsonMode is how to print JSON: "" (text), "short", "pretty", or
// "output" (-o json: the documents of status and doctor as rdmad returns
// them, other commands indented, as rdmactl always printed them).
func (e *env) jsonMode() string {
	switch {
	case e.jsonFlag != "":
		return e.jsonFlag
	case e.output == "json":
		return "output"
	}
	return ""
}

// target is the rdmad to talk to; connecting is bounded as a read is
// (dial or ssh, authentication, Hello), and ssh's stderr reaches the
// user's escaped.
func (e *env) target() client.Target {
	return client.Target{Bus: e.bus, Host: e.host, Timeout: e.readTimeout, Stderr: e.stderr}
}

func (e *env) client() (*client.Client, error) {
	c, err := e.connect(e.target())
	if err != nil {
		return nil, err
	}
	c.Interactive = e.interactive
	return c, nil
}

// read runs a read-only call with a connected client: rdmad answers it
// within ReadTimeout or rdmactl says it is stuck.
func (e *env) read(fn func(c *client.Client, cx context.Context) error) error {
	return e.callWithin(e.readTimeout, fn)
}

// change runs a call that changes the host (polkit may ask first).
func (e *env) change(fn func(c *client.Client, cx context.Context) error) error {
	return e.callWithin(e.changeTimeout, fn)
}

func (e *env) callWithin(d time.Duration, fn func(c *client.Client, cx context.Context) error) error {
	c, err := e.client()
	if err != nil {
		return err
	}
	defer c.Close()
	cx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := fn(c, cx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(cx.Err(), context.DeadlineExceeded) {
			return &timeoutError{after: d, where: e.where()}
		}
		return err
	}
	return nil
}

// where names the rdmad being talked to, for messages.
func (e *env) where() string {
	if e.host != "" {
		return "on " + e.host
	}
	return ""
}

func fixed(words ...string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return slices.Clone(words), cobra.ShellCompDirectiveNoFileComp
	}
}
