package bus

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// callerGate bounds the calls of a kind under way, in all and per uid,
// keeping some for root.
type callerGate struct {
	method             string
	slots, perUID, own int // own: slots only root may take

	mu    sync.Mutex
	byUID map[uint32]int
	taken int
}

// take takes a slot for a call of uid, or says why none is free.
func (g *callerGate) take(uid uint32) (release func(), _ error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.taken >= g.slots:
		return nil, fmt.Errorf("%s: %d calls are being answered (or their reads have not returned), the most at once; try again later", g.method, g.taken)
	case uid != 0 && g.byUID[uid] >= g.perUID:
		return nil, fmt.Errorf("%s: uid %d has %d calls being answered already, the most a user has at once; try again once they are", g.method, uid, g.byUID[uid])
	case uid != 0 && g.taken-g.byUID[0] >= g.slots-g.own:
		return nil, fmt.Errorf("%s: users have %d calls being answered, the most at once (%d kept for root); try again later", g.method, g.taken-g.byUID[0], g.own)
	}
	if g.byUID == nil {
		g.byUID = map[uint32]int{}
	}
	g.byUID[uid]++
	g.taken++
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.byUID[uid]--; g.byUID[uid] <= 0 {
			delete(g.byUID, uid)
		}
		g.taken--
	}, nil
}

// untilDeadline runs work on its own goroutine, which calls release when
// work returns, and answers work's result, or context.DeadlineExceeded
// once timeout passes first. The call ends at its deadline; the slot
// release gives back stays taken by work until it returns, so work that
// does not answer (a kernel read that hangs) never piles up beyond the
// gate's slots.
func untilDeadline[T any](timeout time.Duration, release func(), work func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	type answer struct {
		v   T
		err error
	}
	done := make(chan answer, 1)
	go func() {
		defer release()
		v, err := work(ctx)
		done <- answer{v, err}
	}()
	select {
	case a := <-done:
		return a.v, a.err
	case <-ctx.Done():
		select {
		case a := <-done: // done as the time ran out
			return a.v, a.err
		default:
			var zero T
			return zero, ctx.Err()
		}
	}
}
