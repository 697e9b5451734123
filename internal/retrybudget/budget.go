// Package retrybudget bounds the retries one caller sends to one target
// (a worker tier, an S3 endpoint), so that retries cannot multiply the
// load on a target that is already failing or throttling.
//
// A Budget is a token bucket. Every request sent to the target (a first
// attempt or a retry) earns Ratio of a token, and the bucket also refills
// by Floor tokens a second, up to Burst; a retry takes one whole token, and
// when none is left the retry is refused: the caller fails at once with the
// error it had, marked Exhausted. Over any interval T, a target that sends
// R requests therefore sees at most Ratio/(1-Ratio)·R + (Burst + Floor·T)
// retries: with the defaults, at most ~11 % more requests than the callers
// sent it, plus a small floor that keeps a lightly used target retryable.
// (This is Finagle's RetryBudget and the scheme of the SRE book's "Handling
// Overload" chapter; gRPC's retryThrottling is similar but counts failures,
// not requests, and cannot name itself in the error.)
//
// A Budget also counts: Stats gives the requests, retries and refused
// retries so far, for metrics (zarrgate_retries_total and friends).
//
// The package depends on the standard library only (floor 1): the gateway,
// the S3 store and the transport all use it.
package retrybudget

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a Budget.
const (
	// DefaultRatio is the retries a target may see per request sent to it.
	DefaultRatio = 0.1
	// DefaultBurst is the most tokens a budget holds (and starts with).
	DefaultBurst = 10
	// DefaultFloor is the tokens a second a budget regains without any
	// request, so that a rarely used target can still be retried.
	DefaultFloor = 1.0
)

// Budget is the retry budget of one target. The zero value is not usable:
// make one with New. It is safe for concurrent use.
type Budget struct {
	// Name names the target in errors and stats ("store tier 127.0.0.1:7001",
	// "S3 http://127.0.0.1:9000").
	Name string

	ratio, burst, floor float64

	mu     sync.Mutex
	tokens float64
	last   time.Time

	requests, retries, exhausted atomic.Uint64
}

// New returns a full budget for the target name: ratio tokens per request,
// at most burst tokens, floor tokens a second (zero or negative values take
// the defaults; a ratio of 1 or more is taken as just below 1).
func New(name string, ratio, burst, floor float64) *Budget {
	if ratio <= 0 {
		ratio = DefaultRatio
	}
	ratio = min(ratio, 0.99)
	if burst <= 0 {
		burst = DefaultBurst
	}
	if floor <= 0 {
		floor = DefaultFloor
	}
	return &Budget{Name: name, ratio: ratio, burst: burst, floor: floor, tokens: burst, last: time.Now()}
}

// refill adds the floor's tokens for the time since the last call; b.mu is
// held.
func (b *Budget) refill(now time.Time) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(b.burst, b.tokens+d.Seconds()*b.floor)
		b.last = now
	}
}

// Request notes a request sent to the target (every attempt, retries
// included) and earns its share of a token.
func (b *Budget) Request() {
	b.requests.Add(1)
	b.mu.Lock()
	b.refill(time.Now())
	b.tokens = min(b.burst, b.tokens+b.ratio)
	b.mu.Unlock()
}

// Retry takes the token a retry costs. It reports false, and counts the
// refusal, when the budget is empty.
func (b *Budget) Retry() bool {
	b.mu.Lock()
	b.refill(time.Now())
	ok := b.tokens >= 1
	if ok {
		b.tokens--
	}
	b.mu.Unlock()
	if ok {
		b.retries.Add(1)
	} else {
		b.exhausted.Add(1)
	}
	return ok
}

// Stats are a budget's counters since it was made.
type Stats struct {
	// Requests counts the requests sent (every attempt), Retries the
	// retries allowed, Exhausted the retries refused for want of a token.
	Requests, Retries, Exhausted uint64
}

// Stats returns the counters, for logs and metrics.
func (b *Budget) Stats() Stats {
	return Stats{Requests: b.requests.Load(), Retries: b.retries.Load(), Exhausted: b.exhausted.Load()}
}

// ExhaustedError is the error of a call whose retry was refused by its
// budget, or given up after its attempts: Err is the last attempt's error.
// Callers one hop up should not retry it again (the hop below already
// did); Retried reports that for any error in a chain.
type ExhaustedError struct {
	// Target is the budget's name, Why what ended the retries ("retry
	// budget exhausted", "gave up after 4 attempts").
	Target, Why string
	Err         error
}

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("%s: %v; %s", e.Target, e.Err, e.Why)
}

func (e *ExhaustedError) Unwrap() error { return e.Err }

// Retried reports whether err was already retried by the hop below (an
// ExhaustedError is in its chain, or its chain says so through
// MarkRetried): retrying it again would multiply the load.
func Retried(err error) bool {
	var e *ExhaustedError
	if errors.As(err, &e) {
		return true
	}
	var m interface{ RetriedBelow() bool }
	return errors.As(err, &m) && m.RetriedBelow()
}

// Backoff is jittered exponential backoff: attempt n (from 1) waits a
// uniformly random time in [d/2, 3d/2) with d = base·2^(n-1), capped at max.
type Backoff struct{ Base, Max time.Duration }

// Delay is the wait before retry number n (from 1).
func (b Backoff) Delay(n int) time.Duration {
	d := b.Base
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d)
}

// Wait sleeps d unless ctx ends first or its deadline comes before d has
// passed: a retry that could not start before the caller's deadline is not
// worth waiting for. It reports whether the wait ran its course.
func Wait(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
