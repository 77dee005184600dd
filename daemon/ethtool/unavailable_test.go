package ethtool_test

import (
	"errors"
	"testing"

	"github.com/rdmad/rdmad/daemon/ethtool"
)

func TestUnavailableFailsEveryVerbNamed(t *testing.T) {
	why := errors.New("no kernel here")
	k := ethtool.Unavailable(why)
	_, pause := k.Pause("eth9")
	_, tout := k.PFCStormTimeout("eth9")
	for want, err := range map[string]error{
		"get pause of eth9":               pause,
		"set pause of eth9":               k.SetPause("eth9", false, false),
		"get pfc-prevention-tout of eth9": tout,
		"set pfc-prevention-tout of eth9": k.SetPFCStormTimeout("eth9", 100),
	} {
		if !errors.Is(err, why) || err.Error() != want+": no kernel here" {
			t.Errorf("%s: %v", want, err)
		}
	}
}
