package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rdmad/rdmad/dbusapi"
	"github.com/rdmad/rdmad/dbusapi/client"
)

func init() { register("", statusCommand) }

func statusCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Devices, ports, the last reconcile and problems",
		Long: `Devices and ports, the last reconcile and its result, the configuration
error if the files do not load, which policy is in force (the files, the last
good configuration, or nothing), the ports whose policy failed, and what was
changed over D-Bus (rdmactl, Cockpit) rather than by the files, with who made
each change and when. As JSON it prints the document of
org.rdmad1.Manager.Describe.`,
		RunE: func(cmd *cobra.Command, _ []string) error { return e.status(cmd) },
	}
}

// describe reads the Describe document: the raw JSON rdmad returned and
// its decoding.
func (e *env) describe() (string, *dbusapi.Description, error) {
	var raw string
	if err := e.read(func(c *client.Client, cx context.Context) (err error) {
		raw, err = c.Describe(cx)
		return err
	}); err != nil {
		return "", nil, err
	}
	var d dbusapi.Description
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		return "", nil, &documentError{what: "Describe", err: err}
	}
	return raw, &d, nil
}

// status prints the Describe document: as is with -o json (as hostnamectl
// --json prints hostnamed's), as text otherwise.
func (e *env) status(*cobra.Command) error {
	doc, d, err := e.describe()
	if err != nil {
		return err
	}
	if e.jsonMode() != "" {
		return e.printDoc("Describe", []byte(doc))
	}
	raw := *d
	*d = escaped(*d)
	w := e.stdout
	nports := 0
	for _, dev := range d.Devices {
		nports += len(dev.Ports)
	}
	fmt.Fprintf(w, "rdmad %s: %s, %s\n", d.Version, plural(len(d.Devices), "device", "devices"), plural(nports, "port", "ports"))
	fmt.Fprintf(w, "last reconcile: %s (%s)\n", e.timestamp(d.LastReconcile), dash(d.LastResult))
	if d.ConfigError != "" {
		fmt.Fprintf(w, "config error (the files are not in force):\n  %s\n", indentLines(raw.ConfigError, "  "))
	}
	if in := e.inForceText(d.Manager); in != "" {
		fmt.Fprintf(w, "policy in force: %s\n", in)
	}
	if len(d.ConfigFiles) > 0 {
		fmt.Fprintf(w, "config files: %s\n", strings.Join(d.ConfigFiles, " "))
	}
	if d.LastGoodError != "" {
		fmt.Fprintf(w, "last good configuration: %s\n", d.LastGoodError)
	}
	if len(d.Devices) > 0 {
		fmt.Fprintln(w)
		e.portTable(d.Devices)
	}
	var failed []string
	for _, dev := range d.Devices {
		for _, p := range dev.Ports {
			if p.Error != "" {
				failed = append(failed, fmt.Sprintf("%s/%d: %s", dev.Name, p.Number, p.Error))
			}
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(w, "\nfailed ports:\n  %s\n", strings.Join(failed, "\n  "))
	}
	if drift := driftLines(d.Devices); len(drift) > 0 {
		fmt.Fprintf(w, "\nsettings that do not hold:\n  %s\n", strings.Join(drift, "\n  "))
	}
	if changes := e.changeLines(d.Changes); len(changes) > 0 {
		fmt.Fprintf(w, "\nchanged over D-Bus (rdmactl, Cockpit), not by the site's files:\n  %s\n", strings.Join(changes, "\n  "))
	}
	if len(d.Holds) > 0 {
		var holds []string
		for _, h := range d.Holds {
			holds = append(holds, fmt.Sprintf("%s/%d %s: by %s since %s", h.Device, h.Port, strings.Join(h.Settings, ", "), h.Holder, e.timestamp(h.Since)))
		}
		fmt.Fprintf(w, "\ncorrections held (rdmad reads these settings and does not write them):\n  %s\n", strings.Join(holds, "\n  "))
	}
	for _, dev := range d.Devices {
		if dev.Error != "" {
			fmt.Fprintf(w, "device %s: %s\n", dev.Name, dev.Error)
		}
	}
	for _, a := range d.Actions {
		if a.Status == "failed" && a.Subject.Kind != "device" && a.Subject.Kind != "port" {
			fmt.Fprintf(w, "%s %s: %s\n", a.Subject, a.Kind, a.Error)
		}
	}
	return nil
}

// inForceText says which policy is in force, as the Manager publishes it
// ("" from an rdmad that does not say).
func (e *env) inForceText(m dbusapi.Manager) string {
	switch m.PolicyInForce {
	case "files":
		return "the configuration files"
	case "last-good":
		if m.PolicySaved == 0 {
			return "the last configuration that loaded (not saved)"
		}
		return "last good configuration saved " + e.timestamp(m.PolicySaved)
	case "nothing":
		return "nothing declared (the files do not load and no last good configuration can be used)"
	case "":
		return ""
	}
	return m.PolicyInForce
}

// changeLines lists the declarations made over D-Bus, runtime and
// persisted, each with who made it and when.
func (e *env) changeLines(cs []dbusapi.Change) []string {
	var out []string
	for _, c := range cs {
		what := c.Kind
		if c.Target != "" {
			what = c.Target + " " + c.Kind
		}
		where := "runtime, until rdmad stops"
		if c.Source != "runtime" {
			where = "persisted at " + c.Source
		}
		by := "by a caller rdmad did not record"
		if c.By != "" {
			by = "by " + c.By
		}
		when := ""
		if c.At != 0 {
			when = ", " + e.timestamp(c.At)
		}
		out = append(out, fmt.Sprintf("%s: %s (%s), %s%s", what, c.Values, where, by, when))
	}
	return out
}

// driftLines lists every declared setting that does not hold, as its part
// recorded it: the value now, the declared one and where, and why.
func driftLines(devs []dbusapi.Device) []string {
	var out []string
	for _, dev := range devs {
		for _, p := range dev.Ports {
			for _, st := range p.Settings {
				if !settingDrifted(st) {
					continue
				}
				line := fmt.Sprintf("%s/%d %s: %s, declared %s (%s): %s", dev.Name, p.Number, st.Title, dash(st.Observed), st.Declared, st.Source, st.State)
				if st.Why != "" {
					line += ": " + st.Why
				}
				out = append(out, line)
			}
		}
	}
	return out
}

// settingDrifted: declared, applies, and does not hold.
func settingDrifted(st dbusapi.Setting) bool {
	switch st.State {
	case dbusapi.SettingHolds, dbusapi.SettingUndeclared, dbusapi.SettingNotApplicable:
		return false
	}
	return true
}
