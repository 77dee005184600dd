package dcb

// Unavailable is a Kernel whose every verb fails with err, named by the
// request and the netdev as Netlink names them: rdmad under a --root that
// carries no DCB state of its own, where DCB netlink would act on the
// machine rdmad runs on instead of the fixture's adapters.
func Unavailable(err error) Kernel { return unavailable{err} }

type unavailable struct{ err error }

func (u unavailable) Get(ifname string) (IEEE, error) {
	return IEEE{}, wrap("get IEEE DCB of", ifname, u.err)
}
func (u unavailable) DCBX(ifname string) (uint8, error) {
	return 0, wrap("get DCBX mode of", ifname, u.err)
}
func (u unavailable) SetPFC(ifname string, _ PFC) error { return wrap("set PFC of", ifname, u.err) }
func (u unavailable) SetETS(ifname string, _ ETS) error { return wrap("set ETS of", ifname, u.err) }
func (u unavailable) SetMaxrate(ifname string, _ Maxrate) error {
	return wrap("set the rate limits of", ifname, u.err)
}
func (u unavailable) SetBuffer(ifname string, _ Buffer) error {
	return wrap("set the port buffers of", ifname, u.err)
}
func (u unavailable) SetApp(ifname string, a App) error {
	return wrap("add APP entry "+a.String()+" to", ifname, u.err)
}
func (u unavailable) DelApp(ifname string, a App) error {
	return wrap("delete APP entry "+a.String()+" of", ifname, u.err)
}
func (u unavailable) SetDCBX(ifname string, _ uint8) error {
	return wrap("set the DCBX mode of", ifname, u.err)
}
