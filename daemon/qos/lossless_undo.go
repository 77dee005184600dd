package qos

import (
	"errors"
	"fmt"

	"github.com/rdmad/rdmad/daemon/dcb"
	"github.com/rdmad/rdmad/daemon/reconcile"
)

// Undoing a lossless setting: each Changed action is put back to the
// value it replaced.

// undoLossless puts back what one Changed action of a lossless setting
// changed; handled is false for another setting's action.
func (p *Part) undoLossless(a reconcile.Action) (handled bool, err error) {
	need := func(ok bool, what string) error {
		if !ok {
			return fmt.Errorf("the previous %s of %s is not known", what, a.Subject)
		}
		return nil
	}
	switch a.Kind {
	case CableLength.Kind():
		old, ok := CableLength.Old(a)
		if err := need(ok && old.Netdev != "", "cable length"); err != nil {
			return true, err
		}
		ie, err := p.DCB.Get(old.Netdev)
		if err != nil || ie.PFC == nil {
			return true, errors.Join(err, fmt.Errorf("%s reports no PFC", old.Netdev))
		}
		return true, p.DCB.SetPFC(old.Netdev, NextPFCDelay(*ie.PFC, old.Metres))
	case PrioTC.Kind():
		old, ok := PrioTC.Old(a)
		if err := need(ok && old.Netdev != "", "ETS priority classes"); err != nil {
			return true, err
		}
		ie, err := p.DCB.Get(old.Netdev)
		if err != nil || ie.ETS == nil {
			return true, errors.Join(err, fmt.Errorf("%s reports no ETS", old.Netdev))
		}
		return true, p.DCB.SetETS(old.Netdev, NextETSPrioTC(*ie.ETS, old))
	case Bandwidth.Kind():
		old, ok := Bandwidth.Old(a)
		if err := need(ok && old.Netdev != "", "ETS bandwidth"); err != nil {
			return true, err
		}
		ie, err := p.DCB.Get(old.Netdev)
		if err != nil || ie.ETS == nil {
			return true, errors.Join(err, fmt.Errorf("%s reports no ETS", old.Netdev))
		}
		return true, p.DCB.SetETS(old.Netdev, NextETSBandwidth(*ie.ETS, old.BW))
	case Maxrate.Kind():
		old, ok := Maxrate.Old(a)
		if err := need(ok && old.Netdev != "", "rate limits"); err != nil {
			return true, err
		}
		return true, p.DCB.SetMaxrate(old.Netdev, MaxrateStruct(old))
	case PrioBuffer.Kind(), BufferSize.Kind():
		ie, netdev, err := p.undoBufferRead(a)
		if err != nil {
			return true, err
		}
		var next dcb.Buffer
		if old, ok := PrioBuffer.Old(a); ok {
			next = NextBuffer(*ie.Buffer, &old, nil)
		} else if old, ok := BufferSize.Old(a); ok {
			next = NextBuffer(*ie.Buffer, nil, &old)
		}
		if err := p.DCB.SetBuffer(netdev, next); err != nil {
			return true, err
		}
		if p.driverOf(a) == MLX5Driver {
			return true, fmt.Errorf("%s: the buffers are put back, but mlx5 keeps buffer ownership with the driver until it reloads: %w", netdev, reconcile.ErrNotUndoable)
		}
		return true, nil
	case UDPPortPrio.Kind():
		old, ok := UDPPortPrio.Old(a)
		if err := need(ok && old.Netdev != "", "datagram-port entries"); err != nil {
			return true, err
		}
		ie, err := p.DCB.Get(old.Netdev)
		if err != nil {
			return true, err
		}
		del, add := planEntries(DgramPortsOf(old.Netdev, ie, old.Map).Apps, old.Apps)
		return true, p.writeApps(old.Netdev, del, add)
	case DCBX.Kind():
		old, ok := DCBX.Old(a)
		if err := need(ok && old.Netdev != "", "DCBX mode"); err != nil {
			return true, err
		}
		return true, p.DCB.SetDCBX(old.Netdev, DCBXUndoMode(old.Caps))
	case Pause.Kind():
		old, ok := Pause.Old(a)
		if err := need(ok && old.Netdev != "", "pause"); err != nil {
			return true, err
		}
		return true, p.ethtool().SetPause(old.Netdev, old.Pause.RX, old.Pause.TX)
	case StormTimeout.Kind():
		old, ok := StormTimeout.Old(a)
		if err := need(ok && old.Netdev != "", "PFC storm timeout"); err != nil {
			return true, err
		}
		return true, p.ethtool().SetPFCStormTimeout(old.Netdev, old.MS)
	case ECN.Kind():
		old, ok := ECN.Old(a)
		if err := need(ok && old.Netdev != "", "ECN priorities"); err != nil {
			return true, err
		}
		have, _, err := ReadECN(p.Host, old.Netdev)
		if err != nil {
			return true, err
		}
		return true, WriteECN(p.Host, old.Netdev, have, old)
	case CNPDSCP.Kind():
		old, ok := CNPDSCP.Old(a)
		if err := need(ok && old.Netdev != "", "CNP DSCP"); err != nil {
			return true, err
		}
		return true, writeCNPDSCP(p.Host, old.Netdev, old.Value)
	case CNPPriority.Kind():
		old, ok := CNPPriority.Old(a)
		if err := need(ok && old.Netdev != "", "CNP priority"); err != nil {
			return true, err
		}
		return true, writeCNPPriority(p.Host, old.Netdev, old.Value)
	}
	return false, nil
}

func (p *Part) undoBufferRead(a reconcile.Action) (dcb.IEEE, string, error) {
	netdev := ""
	if old, ok := PrioBuffer.Old(a); ok {
		netdev = old.Netdev
	} else if old, ok := BufferSize.Old(a); ok {
		netdev = old.Netdev
	}
	if netdev == "" {
		return dcb.IEEE{}, "", fmt.Errorf("the previous buffers of %s are not known", a.Subject)
	}
	ie, err := p.DCB.Get(netdev)
	if err == nil && ie.Buffer == nil {
		err = fmt.Errorf("%s reports no port buffers", netdev)
	}
	return ie, netdev, err
}

// driverOf is the driver of the device an action is about ("" when it is
// gone).
func (p *Part) driverOf(a reconcile.Action) string {
	d, err := p.Host.ReadDevice(a.Subject.Device, 0)
	if err != nil {
		return ""
	}
	return d.Driver
}
