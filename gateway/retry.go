package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/retrybudget"
)

// The gateway is the one layer that retries calls to its workers (the
// store tier, the codec tier): gRPC's own retry policy is off for them
// (internal/rpc), the workers' backends retry their own hop (the S3 SDK,
// within its budget) and mark what they gave up on, and the gateway does
// not retry that again. Every retry takes a token of the tier's budget
// (Config.StoreRetries, Config.CodecRetries), so a failing tier sees at
// most ~1.1× the gateway's request rate; an empty budget fails the call at
// once with Unavailable naming the tier. See docs/limits.md, "Retries".

// retryAttempts bounds how often an idempotent store or codec call is
// tried after its worker became unavailable (the budget bounds it first
// when many calls fail at once).
const retryAttempts = 6

// retryBackoff is the jittered exponential backoff between attempts.
var retryBackoff = retrybudget.Backoff{Base: 20 * time.Millisecond, Max: time.Second}

// transient reports errors that another attempt, perhaps on another
// worker, may not meet: the worker went away or dropped the connection.
func transient(err error) bool { return errors.Is(err, errs.Unavailable) }

// again decides, after attempt number attempt (from 1) of a call to the
// tier whose budget is b failed with err, whether to try again: it returns
// nil after the backoff when the error is transient, the hop below did not
// retry it already, attempts and budget remain and the caller's deadline
// leaves room; otherwise the error to return. Each attempt must have been
// noted with b.Request.
func again(ctx context.Context, b *retrybudget.Budget, attempt int, err error) error {
	if !transient(err) || ctx.Err() != nil {
		return err
	}
	if retrybudget.Retried(err) {
		// Retried below already (the S3 SDK, a worker's own budget):
		// another try here would multiply the load on a throttled store.
		return fmt.Errorf("%s: %w", b.Name, err)
	}
	if attempt >= retryAttempts {
		return &retrybudget.ExhaustedError{Target: b.Name, Why: fmt.Sprintf("gave up after %d attempts", attempt), Err: err}
	}
	if !b.Retry() {
		return &retrybudget.ExhaustedError{Target: b.Name, Why: "retry budget exhausted", Err: err}
	}
	noteRetry(ctx, err, "tier", b.Name, "attempt", attempt)
	if !retrybudget.Wait(ctx, retryBackoff.Delay(attempt)) {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		// The deadline comes before the next attempt could start.
		return &retrybudget.ExhaustedError{Target: b.Name, Why: "no time left before the deadline for another attempt", Err: err}
	}
	return nil
}

// retry runs an idempotent operation on the tier whose budget is b,
// repeating it with jittered exponential backoff while again allows.
func retry[T any](ctx context.Context, b *retrybudget.Budget, op func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		b.Request()
		v, err := op()
		if err == nil {
			return v, nil
		}
		if err = again(ctx, b, attempt, err); err != nil {
			return v, err
		}
	}
}

// RetryStats are the gateway's retry counters per tier, for metrics.
func (g *Gateway) RetryStats() (store, codec retrybudget.Stats) {
	return g.cfg.StoreRetries.Stats(), g.cfg.CodecRetries.Stats()
}

// noteRetry counts (Retries) and logs a store or codec call about to be
// repeated after a transient failure (through slog's default logger: the
// serving commands make it theirs). Every retry is a warning: a worker
// stopped gracefully causes none, so one means a worker died, dropped a
// connection, or was cut at the end of its shutdown grace.
func noteRetry(ctx context.Context, err error, attrs ...any) {
	retries.Add(1)
	slog.WarnContext(ctx, "retrying a store or codec call after a transient failure", append(attrs, "error", err)...)
}
