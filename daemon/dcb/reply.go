package dcb

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/rdmad/rdmad/daemon/nlattr"
)

// Reply decoders. Each takes the payload of one reply message (after the
// nlmsghdr), as the kernel sends it.

// attrs parses the attributes after struct dcbmsg and checks its command.
func attrs(msg []byte, cmd uint8) ([]nlattr.Attr, error) {
	if len(msg) < 4 {
		return nil, fmt.Errorf("reply of %d bytes has no dcbmsg", len(msg))
	}
	if msg[1] != cmd {
		return nil, fmt.Errorf("reply is for command %d, want %d", msg[1], cmd)
	}
	as, err := nlattr.Parse(msg[4:])
	if err != nil {
		return nil, fmt.Errorf("reply attributes: %w", err)
	}
	return as, nil
}

// ParseGet decodes a DCB_CMD_IEEE_GET reply.
func ParseGet(msg []byte) (IEEE, error) {
	as, err := attrs(msg, CmdIEEEGet)
	if err != nil {
		return IEEE{}, err
	}
	var ie IEEE
	for _, a := range as {
		switch a.Type {
		case attrDCBX:
			if len(a.Value) >= 1 {
				ie.DCBX, ie.HasDCBX = a.Value[0], true
			}
		case attrIEEE:
			nested, err := nlattr.Parse(a.Value)
			if err != nil {
				return IEEE{}, fmt.Errorf("DCB_ATTR_IEEE: %w", err)
			}
			for _, n := range nested {
				switch n.Type {
				case attrIEEEPFC:
					p, err := unmarshalPFC(n.Value)
					if err != nil {
						return IEEE{}, err
					}
					ie.PFC = &p
				case attrIEEEETS:
					e, err := unmarshalETS(n.Value)
					if err != nil {
						return IEEE{}, err
					}
					ie.ETS = &e
				case attrIEEEMaxrate:
					m, err := unmarshalMaxrate(n.Value)
					if err != nil {
						return IEEE{}, err
					}
					ie.Maxrate = &m
				case attrDCBBuffer:
					b, err := unmarshalBuffer(n.Value)
					if err != nil {
						return IEEE{}, err
					}
					ie.Buffer = &b
				case attrIEEEAppTable:
					apps, err := nlattr.Parse(n.Value)
					if err != nil {
						return IEEE{}, fmt.Errorf("DCB_ATTR_IEEE_APP_TABLE: %w", err)
					}
					for _, ap := range apps {
						var a App
						if ap.Type != attrIEEEApp || a.UnmarshalBinary(ap.Value) != nil {
							continue
						}
						ie.Apps = append(ie.Apps, a)
					}
				}
			}
		}
	}
	return ie, nil
}

// ParseDCBX decodes a DCB_CMD_GDCBX reply: the DCBX capability bits.
func ParseDCBX(msg []byte) (uint8, error) {
	as, err := attrs(msg, CmdGDCBX)
	if err != nil {
		return 0, err
	}
	for _, a := range as {
		if a.Type == attrDCBX && len(a.Value) >= 1 {
			return a.Value[0], nil
		}
	}
	return 0, errors.New("DCB_CMD_GDCBX reply has no DCB_ATTR_DCBX")
}

// StatusError is a SET or DEL the kernel acknowledged while the driver
// refused it: the DCB_ATTR_IEEE status byte of the reply was not zero.
type StatusError struct {
	Cmd    uint8
	Status int8 // the driver's return value, a negative errno
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("driver refused the DCB setting (status %d: %v)", e.Status, e.Unwrap())
}

// DCBXRefusedError is a DCB_CMD_SDCBX the driver refused: its setdcbx
// returns 0 or 1, not an errno (mlx5 refuses a mode without the IEEE bit,
// or LLD-managed; bnxt_en one without the host bit).
type DCBXRefusedError struct {
	Mode   uint8
	Status uint8
}

func (e *DCBXRefusedError) Error() string {
	return fmt.Sprintf("driver refused DCBX mode %#02x (status %d)", e.Mode, e.Status)
}

// ParseSDCBXStatus decodes the reply to DCB_CMD_SDCBX for mode: nil when
// the driver's status is 0.
func ParseSDCBXStatus(msg []byte, mode uint8) error {
	as, err := attrs(msg, CmdSDCBX)
	if err != nil {
		return err
	}
	for _, a := range as {
		if a.Type == attrDCBX && len(a.Value) >= 1 {
			if a.Value[0] != 0 {
				return &DCBXRefusedError{Mode: mode, Status: a.Value[0]}
			}
			return nil
		}
	}
	return errors.New("DCB_CMD_SDCBX reply has no DCB_ATTR_DCBX status")
}

// Unwrap is the errno the driver returned.
func (e *StatusError) Unwrap() error {
	if e.Status < 0 {
		return syscall.Errno(-int(e.Status))
	}
	return syscall.Errno(e.Status)
}

// ParseSetStatus decodes the reply to DCB_CMD_IEEE_SET or DCB_CMD_IEEE_DEL:
// nil when the status byte is 0, a *StatusError otherwise.
func ParseSetStatus(msg []byte, cmd uint8) error {
	as, err := attrs(msg, cmd)
	if err != nil {
		return err
	}
	for _, a := range as {
		if a.Type == attrIEEE && len(a.Value) >= 1 {
			if a.Value[0] != 0 {
				return &StatusError{Cmd: cmd, Status: int8(a.Value[0])}
			}
			return nil
		}
	}
	return errors.New("reply has no DCB_ATTR_IEEE status")
}
