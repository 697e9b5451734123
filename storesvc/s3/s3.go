// Package s3 is a store on Amazon S3 or an S3-compatible server (MinIO,
// versitygw, Ceph RGW, ...): key "a/b" is the object "<prefix>/a/b" in one
// bucket.
//
// Guarantees and how they are met:
//   - Credentials come from the standard AWS chain (environment, shared
//     config/credentials profile, web identity, container and instance roles)
//     through config.LoadDefaultConfig, unless Config carries static keys.
//   - One client and one HTTP transport per store: connections are reused,
//     and up to Config.Parallelism requests run at once for GetPartialValues.
//     Throttling, 5xx answers and network errors are retried with
//     exponential backoff by the SDK's standard retryer (Config.MaxAttempts).
//   - Writes are atomic: a value below Config.PartSize is one PutObject;
//     a larger one is streamed as a multipart upload (never held whole in
//     memory), which becomes visible only when completed, and is aborted if
//     the value's reader fails or ctx is cancelled.
//   - Ranges are HTTP ranges (bytes=a-b, bytes=a-, bytes=-n). S3 truncates a
//     range that runs past the end, answers 416 for one that starts past it,
//     and returns the whole object for a suffix longer than it; the store
//     reads the object size from Content-Range (or a HEAD) and answers
//     exactly as the file store does: ErrOutOfRange naming key and range.
//
// Generations. A generation is "<ETag>:<token>", where token is a random
// value stored with each write as the user metadata "zarrgate-gen". The
// ETag alone is not enough: for single-part objects it is the MD5 of the
// content, so rewriting the same bytes would not change it, and the
// contract wants a new generation on every write. Objects written by other
// tools have no token; their generation is the bare ETag.
//
// Conditional writes. IfAbsent is PutObject (or CompleteMultipartUpload)
// with If-None-Match "*", and IfGenerationMatch is If-Match on the ETag: the
// server checks and writes in one atomic step. The token part of the
// generation is checked by a HEAD just before the write. So a stale
// generation is always refused, except in one race: another writer stores
// byte-identical content between that HEAD and the write. The value then
// holds exactly the bytes the caller conditioned on, so a read-modify-write
// (SetPartialValues in the portable layer, for one) stays correct.
// Conditional Erase is DeleteObject with If-Match on the ETag after the same
// HEAD check. All of this relies on the server honouring the headers:
// AWS S3 does since 2024 (DeleteObject If-Match since 2025); versitygw
// v1.8.0 does for PutObject, CompleteMultipartUpload and DeleteObject
// (TestServerConditions asks the server directly). A server that ignores
// them silently turns conditional writes into unconditional ones and
// conditional erase into a check-then-delete that is not atomic; run
// TestServerConditions against a server before trusting it.
//
// Partial writes. S3 cannot modify an object in place, so SetPartialValues
// comes from the portable layer's fallback: a read-modify-write conditioned
// on the generation, retried with jittered backoff under contention.
package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"golang.org/x/sync/errgroup"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/internal/retrybudget"
	"github.com/zarrgate/zarrgate/storesvc"
)

// Defaults of Config.
const (
	DefaultPartSize          = 8 << 20
	DefaultParallelism       = 16
	DefaultUploadParallelism = 4
	DefaultMaxAttempts       = 5
	DefaultRegion            = "us-east-1"
	// maxDeleteBatch is the most keys one DeleteObjects call takes.
	maxDeleteBatch = 1000
	// minPartSize is S3's smallest part (but the last).
	minPartSize = 5 << 20
	// metaGeneration is the user metadata key holding the write token.
	metaGeneration = "zarrgate-gen"
)

// Config locates a bucket and tunes the client. Only Bucket is required.
type Config struct {
	// Bucket holds the store's objects.
	Bucket string
	// Prefix, when not empty, is prepended with "/" to every key, so that
	// several stores can share a bucket.
	Prefix string
	// Endpoint overrides the S3 endpoint, e.g. "http://127.0.0.1:9000" for
	// an S3-compatible server.
	Endpoint string
	// Region defaults to the AWS configuration's, else DefaultRegion.
	Region string
	// PathStyle addresses the bucket in the URL path (endpoint/bucket/key)
	// instead of the host name; most S3-compatible servers need it.
	PathStyle bool
	// Profile selects a shared configuration profile (default: AWS_PROFILE
	// or "default").
	Profile string
	// AccessKeyID and SecretAccessKey (and SessionToken), when set, replace
	// the default credential chain.
	AccessKeyID, SecretAccessKey, SessionToken string
	// PartSize is the size of multipart upload parts, and the largest value
	// written with one PutObject (default DefaultPartSize, at least 5 MiB).
	PartSize int64
	// Parallelism bounds the concurrent ranged GETs of GetPartialValues
	// (default DefaultParallelism).
	Parallelism int
	// UploadParallelism bounds the parts of one multipart upload in flight;
	// each holds a PartSize buffer (default DefaultUploadParallelism).
	UploadParallelism int
	// MaxAttempts bounds the attempts per request, retries included
	// (default DefaultMaxAttempts).
	MaxAttempts int
	// Retries is the retry budget of this store's requests (the SDK's
	// retry quota, see budgetRetryer). Default: a retrybudget.New budget
	// of its own, named after the endpoint.
	Retries *retrybudget.Budget
	// HTTPClient replaces the SDK's HTTP client (tests, fault injection).
	HTTPClient *http.Client
	// SkipBucketCheck skips the HeadBucket call of New.
	SkipBucketCheck bool
}

// Store is a store on one bucket. It is safe for concurrent use.
type Store struct {
	client  *s3.Client
	bucket  string
	prefix  string // "" or ending with "/"
	cfg     Config
	buffers sync.Pool
}

var (
	_ storesvc.Store         = (*Store)(nil)
	_ storesvc.PartialReader = (*Store)(nil)
	_ storesvc.DirLister     = (*Store)(nil)
	_ storesvc.BatchEraser   = (*Store)(nil)
	_ storesvc.PrefixEraser  = (*Store)(nil)
)

// New connects to the bucket. Unless cfg.SkipBucketCheck, it checks that
// the bucket exists and is reachable with the credentials found.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errs.New(errs.InvalidArgument, "s3 store: no bucket")
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultPartSize
	}
	if cfg.PartSize < minPartSize {
		return nil, errs.New(errs.InvalidArgument, "s3 store: part size %d is below S3's minimum of %d", cfg.PartSize, minPartSize)
	}
	if cfg.Parallelism <= 0 {
		cfg.Parallelism = DefaultParallelism
	}
	if cfg.UploadParallelism <= 0 {
		cfg.UploadParallelism = DefaultUploadParallelism
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.Retries == nil {
		name := "S3"
		if cfg.Endpoint != "" {
			name += " " + cfg.Endpoint
		}
		cfg.Retries = retrybudget.New(name, 0, 0, 0)
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRetryer(func() aws.Retryer {
			return &budgetRetryer{Standard: retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = cfg.MaxAttempts
				o.MaxBackoff = 10 * time.Second
				// The retry quota is the store's budget (budgetRetryer),
				// which counts every request, not the SDK's bucket.
				o.RateLimiter = ratelimit.None
			}), budget: cfg.Retries}
		}),
	}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(cfg.Profile))
	}
	if cfg.AccessKeyID != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, config.WithHTTPClient(cfg.HTTPClient))
	} else {
		conns := max(cfg.Parallelism, cfg.UploadParallelism) * 2
		opts = append(opts, config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConns = max(t.MaxIdleConns, conns)
			t.MaxIdleConnsPerHost = conns
		})))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, errs.Wrap(errs.InvalidArgument, err, "s3 store: load AWS configuration")
	}
	if awsCfg.Region == "" {
		awsCfg.Region = DefaultRegion
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		// Ranged GETs and S3-compatible servers often carry no checksum
		// to validate; that is expected, not worth a log line per GET.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	prefix := strings.Trim(cfg.Prefix, "/")
	if prefix != "" {
		if err := storesvc.ValidateKey(prefix); err != nil {
			return nil, errs.New(errs.InvalidArgument, "s3 store: bad prefix %q: %v", cfg.Prefix, err)
		}
		prefix += "/"
	}
	s := &Store{client: client, bucket: cfg.Bucket, prefix: prefix, cfg: cfg}
	s.buffers.New = func() any { b := make([]byte, cfg.PartSize); return &b }
	if !cfg.SkipBucketCheck {
		if _, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(cfg.Bucket)}); err != nil {
			if code := httpStatus(err); code == http.StatusNotFound {
				return nil, errs.New(errs.NotFound, "s3 store: bucket %q does not exist", cfg.Bucket)
			}
			return nil, s.mapErr("open bucket", "", err)
		}
	}
	return s, nil
}

// Config is the configuration the store was opened with, defaults filled
// in.
func (s *Store) Config() Config { return s.cfg }

// Client is the SDK client, for what the store does not cover (tests
// create buckets with it).
func (s *Store) Client() *s3.Client { return s.client }

// Capabilities implements storesvc.Store: everything. Partial writes are a
// conditional read-modify-write.
func (s *Store) Capabilities() storesvc.Capabilities {
	return storesvc.Capabilities{Readable: true, Writable: true, Listable: true, PartialWrites: true, ConditionalWrites: true, Erasable: true}
}

// Close implements storesvc.Store. Idle connections are released.
func (s *Store) Close() error {
	if ci, ok := s.client.Options().HTTPClient.(interface{ CloseIdleConnections() }); ok && s.cfg.HTTPClient == nil {
		ci.CloseIdleConnections()
	}
	return nil
}

func (s *Store) objectKey(key string) *string { return aws.String(s.prefix + key) }

// --- generations ---

func newToken() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func generation(etag *string, meta map[string]string) string {
	e := strings.Trim(aws.ToString(etag), `"`)
	for k, v := range meta {
		if strings.EqualFold(k, metaGeneration) && v != "" {
			return e + ":" + v
		}
	}
	return e
}

// etagOf returns the quoted ETag part of a generation, for If-Match.
func etagOf(gen string) string {
	if i := strings.LastIndexByte(gen, ':'); i >= 0 {
		gen = gen[:i]
	}
	return `"` + gen + `"`
}

// --- errors ---

// budgetRetryer is the SDK's standard retryer (which retries throttling,
// 5xx and network errors with jittered exponential backoff, within the
// caller's context) with the store's retry budget as its retry quota:
// every attempt is a request of the budget, every retry takes a token,
// and without one the SDK returns the last error at once. So a throttled
// S3 sees at most ~1.1× the store's request rate, where the SDK's own
// quota would allow 100 retries in a burst and then none at all until
// requests succeed.
type budgetRetryer struct {
	*retry.Standard
	budget *retrybudget.Budget
}

// errBudget is the SDK's error when the budget refuses a retry.
var errBudget = errors.New("retry budget exhausted")

func (r *budgetRetryer) GetAttemptToken(ctx context.Context) (func(error) error, error) {
	r.budget.Request()
	return r.Standard.GetAttemptToken(ctx)
}

func (r *budgetRetryer) GetRetryToken(ctx context.Context, opErr error) (func(error) error, error) {
	if !r.budget.Retry() {
		return nil, errBudget
	}
	return r.Standard.GetRetryToken(ctx, opErr)
}

// sdkError is an SDK error with a short message.
type sdkError struct {
	msg string
	err error
}

func (e *sdkError) Error() string { return e.msg }
func (e *sdkError) Unwrap() error { return e.err }

// RetryStats are the store's retry counters, for metrics.
func (s *Store) RetryStats() retrybudget.Stats { return s.cfg.Retries.Stats() }

func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// mapErr gives an SDK error a code, naming the key.
func (s *Store) mapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var code string
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	status := httpStatus(err)
	what := fmt.Sprintf("%s %q", op, key)
	if key == "" {
		what = op
	}
	switch {
	case code == "NoSuchBucket":
		return errs.Wrap(errs.FailedPrecondition, err, "%s: bucket %q does not exist", what, s.bucket)
	case code == "NoSuchKey" || code == "NotFound" || status == http.StatusNotFound:
		return errs.New(errs.NotFound, "%s: key %q not found", op, key)
	case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
		return errs.Wrap(errs.FailedPrecondition, err, "%s: condition does not hold", what)
	case code == "ConditionalRequestConflict" || status == http.StatusConflict:
		return errs.Wrap(errs.FailedPrecondition, err, "%s: conflicting concurrent write", what)
	case code == "AccessDenied" || status == http.StatusForbidden:
		return errs.Wrap(errs.PermissionDenied, err, "%s", what)
	case code == "InvalidRange" || status == http.StatusRequestedRangeNotSatisfiable:
		return errs.Wrap(errs.OutOfRange, err, "%s", what)
	case code == "SlowDown" || status == http.StatusServiceUnavailable || status >= 500 || status == 0:
		// The SDK retried it already, as far as attempts and budget
		// allowed: say so, so that no layer above retries it again.
		st := s.cfg.Retries.Stats()
		why := fmt.Sprintf("retry budget exhausted (%d requests, %d retries so far)", st.Requests, st.Retries)
		var attempts *retry.MaxAttemptsError
		if errors.As(err, &attempts) {
			why = fmt.Sprintf("gave up after %d attempts", attempts.Attempt)
		} else if !errors.Is(err, errBudget) {
			why = "not retried"
		}
		// The SDK's message spans lines and repeats itself: say what S3
		// answered, keeping the SDK's error as the cause.
		msg := code
		if ae != nil && ae.ErrorMessage() != "" {
			msg += ": " + ae.ErrorMessage()
		}
		if status != 0 {
			msg += fmt.Sprintf(" (HTTP %d)", status)
		}
		if code == "" && status == 0 {
			msg = err.Error()
		}
		return errs.Wrap(errs.Unavailable, &retrybudget.ExhaustedError{Target: s.cfg.Retries.Name, Why: why,
			Err: &sdkError{msg: strings.TrimPrefix(msg, ": "), err: err}}, "%s", what)
	}
	return errs.Wrap(errs.Internal, err, "%s", what)
}

// --- reads ---

// head returns size and generation of key.
func (s *Store) head(ctx context.Context, key string) (int64, string, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: s.objectKey(key)})
	if err != nil {
		return 0, "", s.mapErr("get", key, err)
	}
	return aws.ToInt64(out.ContentLength), generation(out.ETag, out.Metadata), nil
}

// Get implements storesvc.Store.
func (s *Store) Get(ctx context.Context, key string, r storesvc.ByteRange) (*storesvc.Object, error) {
	off, n := r.Parts()
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: s.objectKey(key)}
	switch {
	case r.IsWhole() || (!r.IsSuffix() && off == 0 && n < 0):
		// the whole object: no Range header, which also serves empty objects
	case n == 0:
		// HTTP cannot ask for zero bytes: the size decides.
		return s.getEmpty(ctx, key, r)
	case r.IsSuffix():
		in.Range = aws.String(fmt.Sprintf("bytes=-%d", n))
	case n < 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", off))
	default:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	}
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		err = s.mapErr("get", key, err)
		if errors.Is(err, storesvc.ErrOutOfRange) {
			// 416: the range starts past the end, which is fine only for
			// FromOffset(size).
			return s.getEmpty(ctx, key, r)
		}
		return nil, err
	}
	gen := generation(out.ETag, out.Metadata)
	start, length, size, err := responseRange(out)
	if err != nil {
		out.Body.Close()
		return nil, errs.Wrap(errs.Internal, err, "get %q %v", key, r)
	}
	wantOff, wantLen, err := r.Resolve(size)
	if err != nil {
		out.Body.Close()
		return nil, errs.New(errs.OutOfRange, "get %q: %v", key, err)
	}
	body := io.Reader(out.Body)
	if wantOff != start || wantLen != length {
		// The server sent more than asked (a 200 for a range): cut.
		if wantOff < start || wantOff+wantLen > start+length {
			out.Body.Close()
			return nil, errs.New(errs.Internal, "get %q %v: server returned bytes %d-%d of %d", key, r, start, start+length, size)
		}
		if _, err := io.CopyN(io.Discard, out.Body, wantOff-start); err != nil {
			out.Body.Close()
			return nil, s.mapErr("get", key, err)
		}
		body = io.LimitReader(out.Body, wantLen)
	}
	return &storesvc.Object{
		ReadCloser: readCloser{body, out.Body},
		Generation: gen, Size: size, Offset: wantOff, Length: wantLen,
	}, nil
}

// getEmpty answers a range that selects no bytes, or that S3 refused with
// 416, from the object's size.
func (s *Store) getEmpty(ctx context.Context, key string, r storesvc.ByteRange) (*storesvc.Object, error) {
	size, gen, err := s.head(ctx, key)
	if err != nil {
		return nil, err
	}
	off, n, err := r.Resolve(size)
	if err != nil {
		return nil, errs.New(errs.OutOfRange, "get %q: %v", key, err)
	}
	if n != 0 {
		// The object grew between the GET and the HEAD: read again.
		return s.Get(ctx, key, r)
	}
	return &storesvc.Object{ReadCloser: io.NopCloser(bytes.NewReader(nil)), Generation: gen, Size: size, Offset: off}, nil
}

// responseRange returns where the body lies in the object and the
// object's size.
func responseRange(out *s3.GetObjectOutput) (start, length, size int64, err error) {
	cr := aws.ToString(out.ContentRange)
	if cr == "" {
		n := aws.ToInt64(out.ContentLength)
		return 0, n, n, nil
	}
	// "bytes a-b/size"
	spec, ok := strings.CutPrefix(cr, "bytes ")
	span, total, ok2 := strings.Cut(spec, "/")
	first, last, ok3 := strings.Cut(span, "-")
	if !ok || !ok2 || !ok3 {
		return 0, 0, 0, fmt.Errorf("bad Content-Range %q", cr)
	}
	a, err1 := strconv.ParseInt(first, 10, 64)
	b, err2 := strconv.ParseInt(last, 10, 64)
	size, err3 := strconv.ParseInt(total, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || b < a-1 {
		return 0, 0, 0, fmt.Errorf("bad Content-Range %q", cr)
	}
	return a, b - a + 1, size, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// GetPartialValues implements storesvc.PartialReader with up to
// Config.Parallelism ranged GETs at once.
func (s *Store) GetPartialValues(ctx context.Context, reqs []storesvc.KeyRange) ([]storesvc.PartialValue, error) {
	out := make([]storesvc.PartialValue, len(reqs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.Parallelism)
	for i, req := range reqs {
		g.Go(func() error {
			obj, err := s.Get(gctx, req.Key, req.Range)
			if errors.Is(err, storesvc.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			defer obj.Close()
			buf := make([]byte, obj.Length)
			if _, err := io.ReadFull(obj, buf); err != nil {
				return s.mapErr("get", req.Key, err)
			}
			out[i] = storesvc.PartialValue{Data: buf, Found: true, Generation: obj.Generation}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// --- writes ---

// checkGeneration refuses early a condition that does not hold now. For
// IfGenerationMatch this also checks the token part of the generation,
// which the server's If-Match cannot.
func (s *Store) checkGeneration(ctx context.Context, op, key string, cond storesvc.Condition) error {
	if cond.IsZero() {
		return nil
	}
	_, gen, err := s.head(ctx, key)
	switch {
	case errors.Is(err, storesvc.ErrNotFound):
		if cond.IfGenerationMatch != "" {
			return errs.New(errs.FailedPrecondition, "%s: key %q does not exist, expected generation %s", op, key, cond.IfGenerationMatch)
		}
		return nil
	case err != nil:
		return err
	case cond.IfAbsent:
		return errs.New(errs.FailedPrecondition, "%s: key %q already exists (generation %s)", op, key, gen)
	case gen != cond.IfGenerationMatch:
		return errs.New(errs.FailedPrecondition, "%s: key %q has generation %s, expected %s", op, key, gen, cond.IfGenerationMatch)
	}
	return nil
}

func conditionHeaders(cond storesvc.Condition) (ifMatch, ifNoneMatch *string) {
	if cond.IfAbsent {
		ifNoneMatch = aws.String("*")
	}
	if cond.IfGenerationMatch != "" {
		ifMatch = aws.String(etagOf(cond.IfGenerationMatch))
	}
	return ifMatch, ifNoneMatch
}

// Set implements storesvc.Store.
func (s *Store) Set(ctx context.Context, key string, value io.Reader, cond storesvc.Condition) (string, error) {
	if cond.IfGenerationMatch != "" && strings.Contains(cond.IfGenerationMatch, ":") {
		if err := s.checkGeneration(ctx, "set", key, cond); err != nil {
			return "", err
		}
	}
	return s.write(ctx, key, value, cond)
}

// write stores value with one PutObject or a multipart upload; the
// server checks the ETag of cond atomically.
func (s *Store) write(ctx context.Context, key string, value io.Reader, cond storesvc.Condition) (string, error) {
	bp := s.buffers.Get().(*[]byte)
	defer s.buffers.Put(bp)
	buf := *bp
	n, err := io.ReadFull(value, buf)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		if err := ctx.Err(); err != nil {
			return "", err
		}
		return s.put(ctx, key, buf[:n], cond)
	case err != nil:
		return "", errs.Wrap(errs.Aborted, err, "set %q: reading the value", key)
	}
	if cond.IfAbsent {
		// Fail before uploading parts; Complete checks again atomically.
		if err := s.checkGeneration(ctx, "set", key, cond); err != nil {
			return "", err
		}
	}
	return s.multipart(ctx, key, buf, value, cond)
}

func (s *Store) put(ctx context.Context, key string, data []byte, cond storesvc.Condition) (string, error) {
	token := newToken()
	ifMatch, ifNoneMatch := conditionHeaders(cond)
	out, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: &s.bucket, Key: s.objectKey(key),
		Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
		Metadata: map[string]string{metaGeneration: token},
		IfMatch:  ifMatch, IfNoneMatch: ifNoneMatch,
	})
	if err != nil {
		return "", s.condErr("set", key, cond, err)
	}
	return generation(out.ETag, map[string]string{metaGeneration: token}), nil
}

// condErr maps a write error; a conditional write of a missing key that S3
// answers with 404 is a failed precondition.
func (s *Store) condErr(op, key string, cond storesvc.Condition, err error) error {
	err = s.mapErr(op, key, err)
	if !cond.IsZero() && errors.Is(err, storesvc.ErrNotFound) {
		return errs.New(errs.FailedPrecondition, "%s: key %q does not exist, expected generation %s", op, key, cond.IfGenerationMatch)
	}
	return err
}

// multipart streams first and the rest of value as a multipart upload,
// with up to Config.UploadParallelism parts in flight. Any failure, and
// ctx's cancellation, aborts the upload.
func (s *Store) multipart(ctx context.Context, key string, first []byte, value io.Reader, cond storesvc.Condition) (gen string, err error) {
	token := newToken()
	created, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket: &s.bucket, Key: s.objectKey(key),
		Metadata:          map[string]string{metaGeneration: token},
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32,
	})
	if err != nil {
		return "", s.mapErr("set", key, err)
	}
	uploadID := created.UploadId
	defer func() {
		if err != nil {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: s.objectKey(key), UploadId: uploadID})
		}
	}()

	var (
		mu    sync.Mutex
		parts []types.CompletedPart
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.UploadParallelism)
	upload := func(num int32, data []byte, release func()) {
		g.Go(func() error {
			defer release()
			out, err := s.client.UploadPart(gctx, &s3.UploadPartInput{
				Bucket: &s.bucket, Key: s.objectKey(key), UploadId: uploadID,
				PartNumber: aws.Int32(num), Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
				ChecksumAlgorithm: types.ChecksumAlgorithmCrc32,
			})
			if err != nil {
				return s.mapErr("set", key, err)
			}
			mu.Lock()
			parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(num), ETag: out.ETag, ChecksumCRC32: out.ChecksumCRC32})
			mu.Unlock()
			return nil
		})
	}
	// The caller's buffer carries the first part; Set releases it after
	// g.Wait below.
	upload(1, first, func() {})
	readErr := func() error {
		for num := int32(2); ; num++ {
			if err := gctx.Err(); err != nil {
				return err
			}
			bp := s.buffers.Get().(*[]byte)
			n, err := io.ReadFull(value, *bp)
			if n > 0 {
				upload(num, (*bp)[:n], func() { s.buffers.Put(bp) })
			} else {
				s.buffers.Put(bp)
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return nil
			}
			if err != nil {
				return errs.Wrap(errs.Aborted, err, "set %q: reading the value", key)
			}
		}
	}()
	if err := g.Wait(); err != nil {
		return "", err
	}
	if readErr != nil {
		return "", readErr
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	sortParts(parts)
	ifMatch, ifNoneMatch := conditionHeaders(cond)
	done, err := s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: &s.bucket, Key: s.objectKey(key), UploadId: uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
		IfMatch:         ifMatch, IfNoneMatch: ifNoneMatch,
	})
	if err != nil {
		return "", s.condErr("set", key, cond, err)
	}
	return generation(done.ETag, map[string]string{metaGeneration: token}), nil
}

func sortParts(parts []types.CompletedPart) {
	for i := 1; i < len(parts); i++ {
		for j := i; j > 0 && *parts[j].PartNumber < *parts[j-1].PartNumber; j-- {
			parts[j], parts[j-1] = parts[j-1], parts[j]
		}
	}
}

// --- erase ---

// Erase implements storesvc.Store.
func (s *Store) Erase(ctx context.Context, key string, cond storesvc.Condition) error {
	in := &s3.DeleteObjectInput{Bucket: &s.bucket, Key: s.objectKey(key)}
	if cond.IfGenerationMatch != "" {
		if err := s.checkGeneration(ctx, "erase", key, cond); err != nil {
			return err
		}
		in.IfMatch = aws.String(etagOf(cond.IfGenerationMatch))
	}
	if _, err := s.client.DeleteObject(ctx, in); err != nil {
		return s.condErr("erase", key, cond, err)
	}
	return nil
}

// EraseValues implements storesvc.BatchEraser: DeleteObjects, 1000 keys per
// call.
func (s *Store) EraseValues(ctx context.Context, keys []string) error {
	for len(keys) > 0 {
		n := min(len(keys), maxDeleteBatch)
		if err := s.deleteBatch(ctx, "erase_values", keys[:n], true); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// deleteBatch deletes up to 1000 keys, or object names when addPrefix is
// false.
func (s *Store) deleteBatch(ctx context.Context, op string, keys []string, addPrefix bool) error {
	objs := make([]types.ObjectIdentifier, len(keys))
	for i, k := range keys {
		if addPrefix {
			k = s.prefix + k
		}
		objs[i] = types.ObjectIdentifier{Key: aws.String(k)}
	}
	out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
		Bucket: &s.bucket, Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(true)},
	})
	if err != nil {
		return s.mapErr(op, "", err)
	}
	for _, e := range out.Errors {
		if aws.ToString(e.Code) == "NoSuchKey" {
			continue
		}
		kind := errs.Internal
		if aws.ToString(e.Code) == "AccessDenied" {
			kind = errs.PermissionDenied
		}
		return errs.New(kind, "%s: key %q: %s: %s (and %d more errors)", op,
			strings.TrimPrefix(aws.ToString(e.Key), s.prefix), aws.ToString(e.Code), aws.ToString(e.Message), len(out.Errors)-1)
	}
	return nil
}

// ErasePrefix implements storesvc.PrefixEraser: it lists the prefix and
// deletes what it finds 1000 objects per call.
func (s *Store) ErasePrefix(ctx context.Context, prefix string) error {
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix + prefix)})
	var batch []string
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return s.mapErr("erase_prefix", prefix, err)
		}
		for _, o := range page.Contents {
			batch = append(batch, aws.ToString(o.Key))
			if len(batch) == maxDeleteBatch {
				if err := s.deleteBatch(ctx, "erase_prefix", batch, false); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
	}
	if len(batch) > 0 {
		return s.deleteBatch(ctx, "erase_prefix", batch, false)
	}
	return nil
}

// --- listing ---

// storeKey turns an object name into a key, or reports that the object is
// not one (a directory marker "a/", or a name no portable key matches).
func (s *Store) storeKey(name string) (string, bool) {
	k, ok := strings.CutPrefix(name, s.prefix)
	if !ok || storesvc.ValidateKey(k) != nil {
		return "", false
	}
	return k, true
}

// ListPrefix implements storesvc.Store with paginated ListObjectsV2.
// Objects whose names are not valid keys are skipped.
func (s *Store) ListPrefix(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix + prefix)})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				yield("", s.mapErr("list_prefix", prefix, err))
				return
			}
			for _, o := range page.Contents {
				if k, ok := s.storeKey(aws.ToString(o.Key)); ok && !yield(k, nil) {
					return
				}
			}
		}
	}
}

// ListDir implements storesvc.DirLister with ListObjectsV2 and the
// delimiter "/".
func (s *Store) ListDir(ctx context.Context, prefix string) iter.Seq2[storesvc.DirEntry, error] {
	return func(yield func(storesvc.DirEntry, error) bool) {
		p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
			Bucket: &s.bucket, Prefix: aws.String(s.prefix + prefix), Delimiter: aws.String("/"),
		})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				yield(storesvc.DirEntry{}, s.mapErr("list_dir", prefix, err))
				return
			}
			for _, o := range page.Contents {
				if k, ok := s.storeKey(aws.ToString(o.Key)); ok && !yield(storesvc.DirEntry{Path: k}, nil) {
					return
				}
			}
			for _, cp := range page.CommonPrefixes {
				k, ok := s.storeKey(strings.TrimSuffix(aws.ToString(cp.Prefix), "/"))
				if ok && !yield(storesvc.DirEntry{Path: k + "/", IsPrefix: true}, nil) {
					return
				}
			}
		}
	}
}
