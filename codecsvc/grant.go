package codecsvc

import (
	"context"
	"errors"

	"github.com/zarrgate/zarrgate/internal/membudget"
)

// grant is the memory one decode batch holds, from the fetch of its
// chunks (worker-fetch) to its response. It grows as the batch learns
// what it needs, but never by waiting while it holds memory: the budget
// serves waiters in order, so two batches each holding memory and waiting
// for more behind the other would both wait until the budget's wait ran
// out (a hold-and-wait deadlock). Only a grant holding nothing waits;
// one holding some takes more only if it is free now, else the batch
// gives everything back (dropping what it fetched and decoded), waits,
// holding nothing, for all it has learnt it needs, and starts again.
type grant struct {
	b     *membudget.Budget
	held  []membudget.Reservation
	total int64 // the sum of held
	need  int64 // after errRegrant: what to wait for, holding nothing
	again bool  // regranted: keep what was waited for until the batch ends
}

// errRegrant says a grant holding memory could not grow without waiting.
var errRegrant = errors.New("memory not free now")

// grow makes the grant hold at least n bytes: waiting (as Acquire) if it
// holds nothing, else only if they are free now (errRegrant if not, with
// need at least n).
func (g *grant) grow(ctx context.Context, n int64, what string) error {
	if n <= g.total {
		return nil
	}
	if g.total == 0 {
		r, err := g.b.Acquire(ctx, n, what)
		if err != nil {
			return err
		}
		g.held, g.total = []membudget.Reservation{r}, n
		return nil
	}
	if r, ok := g.b.TryAcquire(n - g.total); ok {
		g.held, g.total = append(g.held, r), n
		return nil
	}
	g.need = max(g.need, n)
	return errRegrant
}

// regrant gives everything back and waits, holding nothing, for need.
func (g *grant) regrant(ctx context.Context, what string) error {
	need := g.need
	g.release()
	g.need, g.again = 0, true
	return g.grow(ctx, need, what)
}

// settle gives back what the grant holds beyond keep bytes, the batch's
// needs from here on, unless it was regranted: a batch started again
// keeps what it waited for, so that it passes the point where it stopped
// without asking again.
func (g *grant) settle(keep int64) {
	if !g.again {
		g.shrink(keep)
	}
}

// shrink gives back what the grant holds beyond keep bytes.
func (g *grant) shrink(keep int64) {
	if keep < g.total {
		g.held, g.total = shrinkTo(g.held, keep), max(keep, 0)
	}
}

// release gives everything back.
func (g *grant) release() {
	for _, r := range g.held {
		r.Release()
	}
	g.held, g.total = nil, 0
}

// shrinkTo shrinks the reservations held to keep bytes in all, giving
// back the last ones first; it returns those left.
func shrinkTo(held []membudget.Reservation, keep int64) []membudget.Reservation {
	var total int64
	for _, r := range held {
		total += r.Bytes()
	}
	for excess := total - keep; excess > 0 && len(held) > 0; {
		last := held[len(held)-1]
		if last.Bytes() <= excess {
			last.Release()
			excess -= last.Bytes()
			held = held[:len(held)-1]
			continue
		}
		held[len(held)-1] = last.Shrink(last.Bytes() - excess)
		excess = 0
	}
	return held
}
