package dcb_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/rdmad/rdmad/daemon/dcb"
)

// Every verb of an unavailable kernel fails with its cause, named by the
// request and the netdev as Netlink names them.
func TestUnavailableFailsEveryVerbNamed(t *testing.T) {
	why := errors.New("no kernel here")
	k := dcb.Unavailable(why)
	_, get := k.Get("eth9")
	_, dcbx := k.DCBX("eth9")
	for want, err := range map[string]error{
		"get IEEE DCB of eth9":                    get,
		"get DCBX mode of eth9":                   dcbx,
		"set PFC of eth9":                         k.SetPFC("eth9", dcb.PFC{}),
		"set ETS of eth9":                         k.SetETS("eth9", dcb.ETS{}),
		"set the rate limits of eth9":             k.SetMaxrate("eth9", dcb.Maxrate{}),
		"set the port buffers of eth9":            k.SetBuffer("eth9", dcb.Buffer{}),
		"add APP entry dscp-prio 26:3 to eth9":    k.SetApp("eth9", dcb.DSCP(26, 3)),
		"delete APP entry dscp-prio 26:3 of eth9": k.DelApp("eth9", dcb.DSCP(26, 3)),
		"set the DCBX mode of eth9":               k.SetDCBX("eth9", dcb.CapHost),
	} {
		if !errors.Is(err, why) || err.Error() != want+": no kernel here" {
			t.Errorf("%s: %v", want, err)
		}
		if strings.Count(err.Error(), "eth9") != 1 {
			t.Errorf("%v names the netdev more than once", err)
		}
	}
}
