package config

import (
	"strings"
	"testing"
	"time"
)

// [drift]: action, verify_interval and fight_window, their defaults, their
// bounds (inclusive), and file:line errors for bad values.
func TestDrift(t *testing.T) {
	for _, c := range []struct {
		toml string
		want Drift
		err  string
	}{
		{"", Drift{Action: DriftCorrect, VerifyInterval: DefaultVerifyInterval, FightWindow: DefaultFightWindow}, ""},
		{"[drift]\n", Drift{Action: DriftCorrect, VerifyInterval: DefaultVerifyInterval, FightWindow: DefaultFightWindow, Source: Position{"a.toml", 1}}, ""},
		{"[drift]\naction = \"report\"\n", Drift{Action: DriftReport, VerifyInterval: DefaultVerifyInterval, FightWindow: DefaultFightWindow, Source: Position{"a.toml", 1}}, ""},
		{"[drift]\nverify_interval = \"0\"\n", Drift{Action: DriftCorrect, FightWindow: DefaultFightWindow, Source: Position{"a.toml", 1}}, ""},
		{"[drift]\nverify_interval = \"10s\"\n", Drift{Action: DriftCorrect, VerifyInterval: 10 * time.Second, FightWindow: DefaultFightWindow, Source: Position{"a.toml", 1}}, ""},
		{"[drift]\nverify_interval = \"24h\"\n", Drift{Action: DriftCorrect, VerifyInterval: 24 * time.Hour, FightWindow: DefaultFightWindow, Source: Position{"a.toml", 1}}, ""},
		{"[drift]\nverify_interval = \"9s\"\n", Drift{}, "a.toml:2: drift.verify_interval: 9s is out of range"},
		{"[drift]\nverify_interval = \"25h\"\n", Drift{}, "a.toml:2: drift.verify_interval: 25h is out of range"},
		{"[drift]\nverify_interval = \"5\"\n", Drift{}, "a.toml:2: drift.verify_interval: \"5\" is not a duration"},
		{"[drift]\nverify_interval = 300\n", Drift{}, "a.toml:2: drift.verify_interval"},
		{"[drift]\nfight_window = \"0\"\n", Drift{Action: DriftCorrect, VerifyInterval: DefaultVerifyInterval, Source: Position{"a.toml", 1}}, ""},
		{"[drift]\nfight_window = \"1m\"\n", Drift{Action: DriftCorrect, VerifyInterval: DefaultVerifyInterval, FightWindow: time.Minute, Source: Position{"a.toml", 1}}, ""},
		{"[drift]\nfight_window = \"168h\"\n", Drift{Action: DriftCorrect, VerifyInterval: DefaultVerifyInterval, FightWindow: 7 * 24 * time.Hour, Source: Position{"a.toml", 1}}, ""},
		{"[drift]\nfight_window = \"59s\"\n", Drift{}, "a.toml:2: drift.fight_window: 59s is out of range"},
		{"[drift]\nfight_window = \"169h\"\n", Drift{}, "a.toml:2: drift.fight_window: 169h is out of range"},
		{"[drift]\nfight_window = \"1\"\n", Drift{}, "a.toml:2: drift.fight_window: \"1\" is not a duration"},
		{"[drift]\naction = \"fix\"\n", Drift{}, "a.toml:2: drift.action: \"fix\" is not a [drift] action"},
		{"[drift]\nretry = 1\n", Drift{}, "a.toml:2: drift.retry"},
	} {
		p, err := Parse("a.toml", []byte(c.toml))
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.toml, err, c.err)
			}
		case err != nil:
			t.Errorf("%q: %v", c.toml, err)
		case p.Drift != c.want:
			t.Errorf("%q: %+v, want %+v", c.toml, p.Drift, c.want)
		}
	}
	// Merged key by key: a drop-in changes the action and keeps the
	// interval of the main file.
	a, _ := parseFile("a.toml", []byte("[drift]\nverify_interval = \"1m\"\n"))
	b, _ := parseFile("b.toml", []byte("[drift]\naction = \"report\"\n"))
	if got := mergeDrift([]*fileDecl{a, b}); got.Action != DriftReport || got.VerifyInterval != time.Minute || got.Source.File != "b.toml" {
		t.Errorf("merged: %+v", got)
	}
}
