package fixturekernel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/rdmad/rdmad/daemon/rdmares"
)

// QPFile is the fixture's RDMA resource dump: the queue pairs of its RDMA
// devices, as the kernel's resource tracker lists them (rdma resource
// show qp), one JSON object each. A fixture without it has none.
const QPFile = Dir + "/qp.json"

// Resources is the content of QPFile.
type Resources struct {
	QP []rdmares.QP `json:"qp"`
}

// QueuePairs implements rdmares.Dumper from the fixture's QPFile.
func (k *Kernel) QueuePairs(device string) ([]rdmares.QP, error) {
	b, err := k.Host.ReadFile(QPFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dump the queue pairs of %s: read %s: %w", device, QPFile, err)
	}
	var r Resources
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("dump the queue pairs of %s: %s line %d: %w", device, QPFile, lineOf(b, unknownKeyAt(b, err, dec.InputOffset())), err)
	}
	var out []rdmares.QP
	for _, q := range r.QP {
		if q.Device == device {
			out = append(out, q)
		}
	}
	return out, nil
}

var _ rdmares.Dumper = (*Kernel)(nil)
