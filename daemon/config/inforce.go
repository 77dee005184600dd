package config

import (
	"errors"
	"time"
)

// Origin says which policy a running rdmad applies.
type Origin string

const (
	// OriginFiles: the configuration files as they are now.
	OriginFiles Origin = "files"
	// OriginLastGood: the files do not load; the last configuration that
	// loaded is in force (read again from rdmad's saved copy at start, or
	// the one this rdmad loaded before the files broke).
	OriginLastGood Origin = "last-good"
	// OriginNothing: the files do not load and no last good configuration
	// could be used: nothing is declared (NothingDeclared).
	OriginNothing Origin = "nothing"
)

// Origins lists every Origin, in the order they are published.
var Origins = []Origin{OriginFiles, OriginLastGood, OriginNothing}

// InForce says which policy is in force and how rdmad's safety net, the
// saved last good configuration (LastGoodFile), stands. Everything that
// tells an operator what the host applies (the bus, STATUS=, doctor, the
// metrics) reads it from here, so none claims a last good policy that
// does not exist.
type InForce struct {
	Origin Origin
	// Files are the files the policy in force was read from; for
	// OriginLastGood, the names of the saved copies. None for
	// OriginNothing.
	Files []string
	// Saved is when the last good configuration in force was saved;
	// zero when it was loaded by this rdmad and could not be saved.
	Saved time.Time
	// Unusable says why the saved copy was not applied at start (it
	// is garbage, truncated, not a regular file, not trusted); nil when it
	// was, when there was none, or once a good configuration replaced it.
	Unusable error
	// SaveError says why the last save of the configuration that loaded
	// failed or was refused (a file rdmad did not write at its path); nil
	// when the saved copy is current. A failed save is retried after the
	// next pass.
	SaveError error
}

// LastGoodError is what stands in the way of the safety net, in words
// ("" when nothing does): why the saved copy cannot be used or saved.
func (f InForce) LastGoodError() string {
	var errs []error
	if f.Unusable != nil {
		errs = append(errs, errors.New("the saved copy cannot be used: "+f.Unusable.Error()))
	}
	if f.SaveError != nil {
		errs = append(errs, errors.New("it cannot be saved: "+f.SaveError.Error()))
	}
	if err := errors.Join(errs...); err != nil {
		return err.Error()
	}
	return ""
}

// Describe says in one phrase what is in force, for status lines and
// doctor: "the configuration files", "the last good configuration saved
// 2026-01-02T03:04:05Z", "nothing declared".
func (f InForce) Describe() string {
	switch f.Origin {
	case OriginFiles:
		return "the configuration files"
	case OriginLastGood:
		if f.Saved.IsZero() {
			return "the last configuration that loaded (not saved)"
		}
		return "the last good configuration saved " + f.Saved.UTC().Format(time.RFC3339)
	}
	return "nothing declared"
}
