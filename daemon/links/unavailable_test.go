package links_test

import (
	"errors"
	"testing"

	"github.com/rdmad/rdmad/daemon/links"
)

func TestUnavailableFailsEveryVerbNamed(t *testing.T) {
	why := errors.New("no kernel here")
	k := links.Unavailable(why)
	for want, err := range map[string]error{
		"rdma link add rxe0 type rxe netdev eth9": k.LinkAdd("rxe0", "rxe", "eth9"),
		"rdma link delete rxe0":                   k.LinkDel("rxe0"),
	} {
		if !errors.Is(err, why) || err.Error() != want+": no kernel here" {
			t.Errorf("%s: %v", want, err)
		}
	}
}
