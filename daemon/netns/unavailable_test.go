package netns_test

import (
	"errors"
	"testing"

	"github.com/rdmad/rdmad/daemon/config"
	"github.com/rdmad/rdmad/daemon/netns"
)

func TestUnavailableFailsEveryVerbNamed(t *testing.T) {
	why := errors.New("no kernel here")
	k := netns.Unavailable(why)
	_, mode := k.Mode()
	for want, err := range map[string]error{
		"rdma system show netns":          mode,
		"rdma system set netns exclusive": k.SetMode(config.NetnsExclusive),
	} {
		if !errors.Is(err, why) || err.Error() != want+": no kernel here" {
			t.Errorf("%s: %v", want, err)
		}
	}
}
