package bus

import "testing"

// ReadPorts' bound: 2 reads at once for a user, 6 for all users together,
// 8 in all with root's: a user's reads never keep root's from running,
// and a slot comes back when its read ends.
func TestLiveReadBound(t *testing.T) {
	g := &callerGate{method: "ReadPorts", slots: liveSlots, perUID: liveSlotsPerUID, own: liveRootSlots}
	var release []func()
	take := func(uid uint32) error {
		r, err := g.take(uid)
		if err == nil {
			release = append(release, r)
		}
		return err
	}
	for i := range liveSlotsPerUID {
		if err := take(1000); err != nil {
			t.Fatalf("read %d of uid 1000: %v", i+1, err)
		}
	}
	if err := take(1000); err == nil {
		t.Fatalf("uid 1000 took %d reads at once", liveSlotsPerUID+1)
	}
	for uid := uint32(2000); len(release) < liveSlots-liveRootSlots; uid++ {
		if err := take(uid); err != nil {
			t.Fatalf("read %d in all (uid %d): %v", len(release)+1, uid, err)
		}
	}
	if err := take(9999); err == nil {
		t.Fatal("users took the slots kept for root")
	}
	for i := range liveRootSlots {
		if err := take(0); err != nil {
			t.Fatalf("root's read %d beside the users': %v", i+1, err)
		}
	}
	if err := take(0); err == nil {
		t.Fatalf("%d reads at once", liveSlots+1)
	}
	release[0]() // one of uid 1000's
	if err := take(1000); err != nil {
		t.Errorf("uid 1000 after one of its reads ended: %v", err)
	}
}
