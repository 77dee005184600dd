package service

import (
	"fmt"
	"strings"

	"github.com/rdmad/rdmad/daemon/reconcile"
)

// ArgError is an invalid argument to a mutating operation. It is returned
// before anything was touched; the bus maps it to InvalidArgs.
type ArgError struct {
	Arg string // name of the argument, as in the D-Bus signature
	Msg string
}

func (e *ArgError) Error() string { return fmt.Sprintf("invalid argument %s: %s", e.Arg, e.Msg) }

// Missing is the kind of thing a NotFoundError says does not exist.
type Missing int

const (
	MissingDevice Missing = iota // an RDMA device, or the netdev of a link
	MissingPort                  // a port of an existing device
	MissingLink                  // a declared soft link
)

// NotFoundError says a well-formed name given to a call names nothing that
// exists. Like an ArgError it is returned before anything was touched; the
// bus maps it to org.rdmad1.Error.NoSuchDevice, NoSuchPort or NoSuchLink
// (a malformed name is an ArgError: InvalidArgs).
type NotFoundError struct {
	What Missing
	Arg  string // name of the argument, as in the D-Bus signature
	Msg  string
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("argument %s: %s", e.Arg, e.Msg) }

// ConfigError wraps a configuration that does not load: the last good
// policy stays in force.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// ApplyError says the kernel refused a change. The change was withdrawn
// (the runtime overlay or rdmad's drop-in restored) so the policy in force
// does not keep failing on every pass, and the kernel values the same call
// had already set were put back, so nothing stays half-applied.
type ApplyError struct {
	Failed   []reconcile.Action // what this call asked for and the kernel refused
	Restored []reconcile.Action // values the call had set, put back: From is the refused call's value, To the one restored
	UndoErr  error              // what could not be undone; nil when everything was
}

func (e *ApplyError) Error() string {
	var b strings.Builder
	b.WriteString("the kernel refused the change: ")
	for i, a := range e.Failed {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %s", a.Subject, a.Kind)
		if a.To != "" {
			fmt.Fprintf(&b, " %q", a.To)
		}
		fmt.Fprintf(&b, ": %v", a.Err)
	}
	b.WriteString(". The declaration was withdrawn")
	if len(e.Restored) > 0 {
		b.WriteString(" and the values this call had already set were put back (")
		for i, a := range e.Restored {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %s %q -> %q", a.Subject, a.Kind, a.From, a.To)
		}
		b.WriteString(")")
	}
	if e.UndoErr != nil {
		fmt.Fprintf(&b, ", but undoing it failed: %v", e.UndoErr)
	}
	return b.String()
}

// Unwrap gives the kernel's errors (errors.Is(err, syscall.EIO)) and the
// undo error.
func (e *ApplyError) Unwrap() []error {
	var errs []error
	for _, a := range e.Failed {
		if a.Err != nil {
			errs = append(errs, a.Err)
		}
	}
	if e.UndoErr != nil {
		errs = append(errs, e.UndoErr)
	}
	return errs
}

// NextBootError says a persisted change holds but the running kernel
// refused to take it now: it applies at the next boot. Nothing was
// withdrawn.
type NextBootError struct{ Err error }

func (e *NextBootError) Error() string { return e.Err.Error() }
func (e *NextBootError) Unwrap() error { return e.Err }
