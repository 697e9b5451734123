package gateway

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/zarrgate/zarrgate/errs"
)

// retryAttempts bounds how often an idempotent store or codec call is
// repeated after its worker became unavailable.
const retryAttempts = 6

// transient reports errors that another attempt, perhaps on another
// worker, may not meet: the worker went away or dropped the connection.
func transient(err error) bool { return errors.Is(err, errs.Unavailable) }

// retry runs an idempotent operation, repeating it with jittered
// exponential backoff while it fails transiently.
func retry[T any](ctx context.Context, op func() (T, error)) (T, error) {
	backoff := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		v, err := op()
		if err == nil || !transient(err) || attempt == retryAttempts || ctx.Err() != nil {
			return v, err
		}
		noteRetry(ctx, err, "attempt", attempt)
		select {
		case <-time.After(backoff/2 + rand.N(backoff)):
		case <-ctx.Done():
			return v, ctx.Err()
		}
		backoff = min(2*backoff, time.Second)
	}
}

// noteRetry counts (Retries) and logs a store or codec call about to be repeated after a
// transient failure (through slog's default logger: the serving commands
// make it theirs). Every retry is a warning: a worker stopped gracefully
// causes none, so one means a worker died, dropped a connection, or was
// cut at the end of its shutdown grace.
func noteRetry(ctx context.Context, err error, attrs ...any) {
	retries.Add(1)
	slog.WarnContext(ctx, "retrying a store or codec call after a transient failure", append(attrs, "error", err)...)
}
