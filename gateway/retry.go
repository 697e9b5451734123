package gateway

import (
	"context"
	"errors"
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
		retries.Add(1)
		select {
		case <-time.After(backoff/2 + rand.N(backoff)):
		case <-ctx.Done():
			return v, ctx.Err()
		}
		backoff = min(2*backoff, time.Second)
	}
}
