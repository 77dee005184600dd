package ethtool

// Unavailable is a Kernel whose every verb fails with err, named by the
// request and the netdev as Netlink names them: rdmad under a --root that
// carries no ethtool state of its own.
func Unavailable(err error) Kernel { return unavailable{err} }

type unavailable struct{ err error }

func (u unavailable) Pause(ifname string) (Pause, error) {
	return Pause{}, wrap("get pause of", ifname, u.err)
}
func (u unavailable) SetPause(ifname string, _, _ bool) error {
	return wrap("set pause of", ifname, u.err)
}
func (u unavailable) PFCStormTimeout(ifname string) (uint16, error) {
	return 0, wrap("get pfc-prevention-tout of", ifname, u.err)
}
func (u unavailable) SetPFCStormTimeout(ifname string, _ uint16) error {
	return wrap("set pfc-prevention-tout of", ifname, u.err)
}
