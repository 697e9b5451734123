package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/zarrgate/zarrgate/client"
	"github.com/zarrgate/zarrgate/storesvc/s3/s3test"
)

// slowDownProxy stands between the store worker and a real S3-compatible
// server: it forwards every request, except that while told to it answers
// 503 SlowDown as a throttling S3 does. It counts every request it sees,
// and how many of them repeated one it had seen before (same method,
// path, query and Range): those are retries, whichever layer sent them.
type slowDownProxy struct {
	*httptest.Server
	mu        sync.Mutex
	failFirst int       // requests left to throttle
	failUntil time.Time // throttle every request until then
	total     int
	seen      map[string]bool
	repeats   int
}

func newSlowDownProxy(t *testing.T, endpoint string) *slowDownProxy {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &slowDownProxy{seen: map[string]bool{}}
	// The request keeps its Host header (the proxy's), which is what the
	// SDK signed: the server checks the signature against it.
	fwd := httputil.NewSingleHostReverseProxy(u)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.total++
		k := r.Method + " " + r.URL.RequestURI() + " " + r.Header.Get("Range")
		if p.seen[k] {
			p.repeats++
		}
		p.seen[k] = true
		throttle := p.failFirst > 0 || time.Now().Before(p.failUntil)
		if p.failFirst > 0 {
			p.failFirst--
		}
		p.mu.Unlock()
		if throttle {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><RequestId>proxy</RequestId></Error>`)
			return
		}
		fwd.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// reset starts a new count and sets the faults: the next n requests, and
// every request for d, are throttled.
func (p *slowDownProxy) reset(n int, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failFirst, p.failUntil = n, time.Now().Add(d)
	p.total, p.repeats, p.seen = 0, 0, map[string]bool{}
}

// counts returns the requests seen since reset, and how many were repeats.
func (p *slowDownProxy) counts() (total, repeats int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total, p.repeats
}

// A throttling S3 is backed off within the retry budget, not amplified:
// client → gateway → store worker → (proxy) → versitygw, all real. The
// retries the store sees stay within the budget (10 % of its requests
// plus the burst and floor), a short throttle is absorbed, and a long
// one fails the slab with UNAVAILABLE naming the store tier, long before
// its deadline, instead of hammering S3 until then.
func TestS3SlowDownWithinRetryBudget(t *testing.T) {
	srv, err := s3test.Start()
	if err != nil {
		if s3test.Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bucket, err := srv.CreateBucket(ctx, "retry")
	if err != nil {
		t.Fatal(err)
	}
	px := newSlowDownProxy(t, srv.Endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
	worker := startWithAdmin(t, "store-worker", true, "--root", "s3://"+bucket+"?endpoint="+px.URL+"&region=us-east-1")
	// The store worker exports its S3 retries (the SDK's, within the
	// store's budget) as tier s3.
	const s3Retries, s3Refused = `zarrgate_retries_total{tier="s3"}`, `zarrgate_retries_refused_total{tier="s3"}`
	gw := startCommand(t, "gateway", "--store", worker.addr)

	c, err := client.Dial(ctx, gw.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n, chunk = 512, 8 // 64 chunks, one GET each
	a, err := c.CreateArray(ctx, "a", client.ArraySpec{Shape: []int64{n}, DataType: "int32", ChunkShape: []int64{chunk}})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int32, n)
	for i := range want {
		want[i] = int32(i + 1)
	}
	if _, err := client.Write(ctx, a, nil, want); err != nil {
		t.Fatal(err)
	}
	read := func(ctx context.Context) error {
		got, _, err := client.Read[int32](ctx, a, client.MustParseSelection("0:512"))
		if err != nil {
			return err
		}
		for i := range want {
			if got[i] != want[i] {
				return fmt.Errorf("element %d: %d, want %d", i, got[i], want[i])
			}
		}
		return nil
	}

	// Healthy: how many requests one read makes, none repeated.
	px.reset(0, 0)
	if err := read(ctx); err != nil {
		t.Fatal(err)
	}
	base, rep := px.counts()
	t.Logf("healthy read: %d S3 requests, %d repeats", base, rep)

	// A short throttle (the next 8 requests): absorbed by the store
	// worker's SDK retries, each throttled request retried about once.
	m0 := worker.scrape(t)
	if _, ok := m0[s3Retries]; !ok {
		t.Fatalf("the store worker exports no %s", s3Retries)
	}
	px.reset(8, 0)
	if err := read(ctx); err != nil {
		t.Fatalf("read under a short throttle: %v", err)
	}
	total, rep := px.counts()
	t.Logf("read with the first 8 requests throttled: %d S3 requests, %d repeats", total, rep)
	if rep > 8+2 {
		t.Errorf("a throttle of 8 requests caused %d repeated S3 requests", rep)
	}
	m1 := worker.scrape(t)
	if d := m1[s3Retries] - m0[s3Retries]; d < 1 || d > float64(total) {
		t.Errorf("%s moved by %v under a short throttle, want 1..%d (the requests S3 saw)", s3Retries, d, total)
	}

	// A long throttle: the read fails fast, naming the tier, and the
	// retries S3 saw stay within the budget: burst 10, 10 % of the
	// requests, 1 a second.
	px.reset(0, time.Minute)
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	start := time.Now()
	err = read(rctx)
	rcancel()
	took := time.Since(start)
	total, rep = px.counts()
	t.Logf("read under a long throttle: %v after %v; %d S3 requests, %d repeats", err, took.Round(time.Millisecond), total, rep)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "store tier") || !strings.Contains(err.Error(), "SlowDown") {
		t.Errorf("read under a long throttle: %v, want Unavailable naming the store tier and SlowDown", err)
	}
	// The SDK backs off for at most 1+2+4+8 s (jittered) over its 5
	// attempts, and fails at once when the budget is empty: the read
	// ends well before its deadline either way.
	if took > 20*time.Second {
		t.Errorf("read under a long throttle took %v: it should end long before its deadline", took)
	}
	if budget := 10 + 0.12*float64(total) + took.Seconds() + 1; float64(rep) > budget {
		t.Errorf("S3 saw %d repeated requests of %d under a long throttle, over the retry budget (%.0f)", rep, total, budget)
	}
	m2 := worker.scrape(t)
	retried, refused := m2[s3Retries]-m1[s3Retries], m2[s3Refused]-m1[s3Refused]
	t.Logf("long throttle: the store worker counts %v retries and %v refused", retried, refused)
	if retried > float64(total) || retried+refused < 1 {
		t.Errorf("under a long throttle %s moved by %v and %s by %v; S3 saw %d requests", s3Retries, retried, s3Refused, refused, total)
	}

	// The throttle ends: reads work again.
	px.reset(0, 0)
	var last error
	if !waitFor(30*time.Second, func() bool { last = read(ctx); return last == nil }) {
		t.Errorf("reads do not recover after the throttle: %v", last)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("test ran out of time")
	}
}
