package dbusapi

import (
	"encoding/json"
	"fmt"
)

// MaxPlanCandidate bounds Plan's candidate: the size of a drop-in.
const MaxPlanCandidate = 1 << 20

// Plan is the JSON document org.rdmad1.Manager.Plan returns: what the
// policy (the files in force plus the candidate) would change, per
// subject and setting, or why it does not load. Loads tells which.
type Plan struct {
	Loads bool `json:"loads"`
	// Files are the files of the planned policy, in merge order, the
	// candidate under the name it was given.
	Files []string `json:"files"`
	// Problems say why it does not load, each with its file and line.
	Problems []ConfigProblem `json:"problems"`
	// Settings are the settings the planned policy declares, then those
	// the policy in force declares and it would no longer.
	Settings []PlannedSetting `json:"settings"`
	// Steps are what the policy would do beyond its settings (load
	// modules, remove a file rdmad wrote).
	Steps []PlannedStep `json:"steps"`
	// WouldChange counts the settings a pass would write (Changes without
	// the steps), WouldInterrupt those of them that interrupt traffic, and
	// Interrupted names their subjects ("mlx5_0/1"), each once: what
	// Interruptions says, in the document for scripts (Ansible's check
	// mode). EncodePlan fills them in.
	WouldChange    int      `json:"would_change"`
	WouldInterrupt int      `json:"would_interrupt"`
	Interrupted    []string `json:"interrupted"`
}

// ConfigProblem is one reason a configuration does not load.
type ConfigProblem struct {
	File    string `json:"file"` // "" when the problem is not in one file
	Line    int    `json:"line"` // 0 when the parser could not tell
	Key     string `json:"key"`
	Problem string `json:"problem"`
	// Text is the whole problem as rdmad --check-config prints it
	// ("file:line: key: problem").
	Text string `json:"text"`
}

// PlannedSetting is one setting of one subject: the value now, the value
// the planned policy would set and where it declares it.
type PlannedSetting struct {
	Subject Subject `json:"subject"`
	Name    string  `json:"name"`  // the setting's name (roce_tos), as in Port.Settings
	Title   string  `json:"title"` // "RoCE TOS"
	Now     string  `json:"now"`   // what the kernel holds now; "" when unknown
	// Planned is the value the policy would set; for a setting it would
	// release, the value rdmad found before its first change this boot,
	// which it puts back ("" when none is recorded: the value stays).
	Planned string `json:"planned"`
	Source  string `json:"source"` // file:line of Planned
	// Change says what a pass under the planned policy would do:
	// PlanNone, PlanSet, PlanRelease, PlanHeld, PlanRefused, PlanUnknown,
	// PlanNotApplicable or PlanNextBoot.
	Change string `json:"change"`
	Why    string `json:"why"` // why it is held, refused, unknown or not applicable
	// InForce and InForceSource are the value and file:line the policy in
	// force declares, "" when it declares none.
	InForce       string `json:"in_force"`
	InForceSource string `json:"in_force_source"`
	// Disrupts says the change ("set", or "release" of a value found)
	// interrupts traffic on the subject: rdmad's table of what a change of
	// each setting does on each driver says so. Disruption is how
	// (DisruptsLink...), DisruptionWhen when the driver does it.
	Disrupts       bool   `json:"disrupts"`
	Disruption     string `json:"disruption"`
	DisruptionWhen string `json:"disruption_when"`
}

// The changes of a planned setting (PlannedSetting.Change).
const (
	PlanNone          = "none"           // the kernel holds the planned value
	PlanSet           = "set"            // the planned value would be written
	PlanRelease       = "release"        // the policy in force declares it, the planned one would not
	PlanHeld          = "held"           // it differs but would not be written: another manager owns it
	PlanRefused       = "refused"        // it cannot be set on this subject now (Why says why)
	PlanUnknown       = "unknown"        // the kernel's value could not be read
	PlanNotApplicable = "not-applicable" // declared, but it does not apply to the subject
	PlanNextBoot      = "next-boot"      // the running kernel takes it only at the next boot
)

// How a change interrupts traffic (PlannedSetting.Disruption, the effects
// of Manager.Disruptions).
const (
	DisruptsQueues = "queue-reset"  // the driver reopens the netdev's queues: a moment without traffic
	DisruptsLink   = "link-toggle"  // the driver takes the port's link down and up: about a second
	DisruptsDevice = "device-reset" // the driver registers the device again: every port of it stops
)

// PlannedStep is a step of the pass that keeps no setting.
type PlannedStep struct {
	Subject Subject `json:"subject"`
	Kind    string  `json:"kind"`
	Now     string  `json:"now"`
	Planned string  `json:"planned"`
	Source  string  `json:"source"`
}

// Changes counts the settings and steps a pass would write or remove: a
// released setting counts when a value found differs from the kernel's.
func (p Plan) Changes() int {
	n := len(p.Steps)
	for _, s := range p.Settings {
		if s.Change == PlanSet || s.Change == PlanRelease && s.Planned != "" && s.Planned != s.Now {
			n++
		}
	}
	return n
}

// Interruptions counts the settings a pass would write whose change
// interrupts traffic, and names their subjects ("mlx5_0/1"), each once,
// in plan order.
func (p Plan) Interruptions() (settings int, subjects []string) {
	seen := map[string]bool{}
	for _, s := range p.Settings {
		if !s.Disrupts || (s.Change != PlanSet && s.Change != PlanRelease) {
			continue
		}
		settings++
		if name := s.Subject.String(); !seen[name] {
			seen[name] = true
			subjects = append(subjects, name)
		}
	}
	return settings, subjects
}

// EncodePlan is the JSON document Plan returns; empty lists are [].
func EncodePlan(p Plan) (string, error) {
	if p.Files == nil {
		p.Files = []string{}
	}
	if p.Problems == nil {
		p.Problems = []ConfigProblem{}
	}
	if p.Settings == nil {
		p.Settings = []PlannedSetting{}
	}
	if p.Steps == nil {
		p.Steps = []PlannedStep{}
	}
	p.WouldChange = p.Changes() - len(p.Steps)
	p.WouldInterrupt, p.Interrupted = p.Interruptions()
	if p.Interrupted == nil {
		p.Interrupted = []string{}
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode the plan as JSON: %w", err)
	}
	return string(b), nil
}

// DecodePlan reads what Plan returned; fields a newer rdmad adds are
// ignored.
func DecodePlan(doc string) (Plan, error) {
	var p Plan
	if err := json.Unmarshal([]byte(doc), &p); err != nil {
		return Plan{}, fmt.Errorf("the reply of Plan is not a plan: %w", err)
	}
	return p, nil
}
