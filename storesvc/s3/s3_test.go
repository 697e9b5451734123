package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/s3"
	"github.com/zarrgate/zarrgate/storesvc/s3/s3test"
	"github.com/zarrgate/zarrgate/storesvc/storetest"
)

func TestMain(m *testing.M) { s3test.Main(m) }

var ctx = context.Background()

// The whole suite on a bucket of its own, and again under a prefix in a
// bucket that also holds objects outside it.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storesvc.Store { return s3test.NewStore(t, "") }, storetest.Options{LargeValue: 20 << 20})
}

func TestConformancePrefix(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storesvc.Store {
		st := s3test.NewStore(t, "deep/pre fix")
		// A neighbour that no operation of the store may see or touch.
		if _, err := st.Client().PutObject(ctx, &awss3.PutObjectInput{
			Bucket: aws.String(bucketOf(t, st)), Key: aws.String("deep/pre fixed"), Body: strings.NewReader("n"),
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := st.Client().HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(bucketOf(t, st)), Key: aws.String("deep/pre fixed")}); err != nil {
				t.Errorf("the object outside the prefix is gone: %v", err)
			}
		})
		return st
	})
}

func bucketOf(_ *testing.T, st *s3.Store) string { return st.Config().Bucket }

// Keys map to "<prefix>/<key>" objects, and objects written by other
// tools are values with the bare ETag as generation.
func TestKeyLayout(t *testing.T) {
	raw := s3test.NewStore(t, "root")
	s := storesvc.Wrap(raw)
	if _, err := s.Set(ctx, "g/arr/c/0", strings.NewReader("chunk"), storesvc.Condition{}); err != nil {
		t.Fatal(err)
	}
	out, err := raw.Client().GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(raw.Config().Bucket), Key: aws.String("root/g/arr/c/0")})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(b) != "chunk" {
		t.Fatalf("object content %q", b)
	}
	put, err := raw.Client().PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String(raw.Config().Bucket), Key: aws.String("root/g/zarr.json"), Body: strings.NewReader("{}")})
	if err != nil {
		t.Fatal(err)
	}
	v, gen, err := storesvc.ReadAll(ctx, s, "g/zarr.json")
	if err != nil || string(v) != "{}" {
		t.Fatalf("ReadAll = %q, %v", v, err)
	}
	if want := strings.Trim(aws.ToString(put.ETag), `"`); gen != want {
		t.Fatalf("generation of a foreign object = %q, want its ETag %q", gen, want)
	}
	if _, err := s.Set(ctx, "g/zarr.json", strings.NewReader("{1}"), storesvc.Condition{IfGenerationMatch: gen}); err != nil {
		t.Fatalf("conditional write on a foreign object: %v", err)
	}
	// A directory marker is not a key.
	if _, err := raw.Client().PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String(raw.Config().Bucket), Key: aws.String("root/g/"), Body: strings.NewReader("")}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k, err := range s.ListPrefix(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if fmt.Sprint(keys) != "[g/arr/c/0 g/zarr.json]" {
		t.Fatalf("keys = %q", keys)
	}
}

// Values above the part size go up as multipart uploads, with conditions
// on CompleteMultipartUpload; a failing or cancelled upload leaves nothing
// behind, not even an incomplete upload.
func TestMultipart(t *testing.T) {
	raw := s3test.NewStore(t, "")
	s := storesvc.Wrap(raw)
	big := bytes.Repeat([]byte("0123456789abcdef"), (s3.DefaultPartSize*2+12345)/16)
	g1, err := s.Set(ctx, "big", bytes.NewReader(big), storesvc.Condition{IfAbsent: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(g1, "-3:") {
		t.Errorf("generation %q: not a 3-part upload", g1)
	}
	v, gen, err := storesvc.ReadAll(ctx, s, "big")
	if err != nil || !bytes.Equal(v, big) || gen != g1 {
		t.Fatalf("read back %d bytes, generation %q (want %q), %v", len(v), gen, g1, err)
	}
	_, err = s.Set(ctx, "big", bytes.NewReader(big), storesvc.Condition{IfAbsent: true})
	if !errors.Is(err, storesvc.ErrPrecondition) {
		t.Fatalf("multipart IfAbsent on an existing key: %v", err)
	}
	g2, err := s.Set(ctx, "big", bytes.NewReader(big), storesvc.Condition{IfGenerationMatch: g1})
	if err != nil {
		t.Fatalf("multipart IfGenerationMatch: %v", err)
	}
	if g2 == g1 {
		t.Fatal("rewrite kept the generation")
	}
	_, err = s.Set(ctx, "big", bytes.NewReader(big), storesvc.Condition{IfGenerationMatch: g1})
	if !errors.Is(err, storesvc.ErrPrecondition) {
		t.Fatalf("multipart with a stale generation: %v", err)
	}
	// The reader fails after two parts.
	_, err = s.Set(ctx, "broken", io.MultiReader(bytes.NewReader(big[:s3.DefaultPartSize*2+5]), failing{}), storesvc.Condition{})
	if err == nil {
		t.Fatal("Set from a failing reader succeeded")
	}
	ups, err := raw.Client().ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: aws.String(raw.Config().Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Fatalf("%d multipart uploads left behind", len(ups.Uploads))
	}
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

// Errors carry codes, and name what failed.
func TestErrors(t *testing.T) {
	srv := s3test.Current(t)
	_, err := s3.New(ctx, srv.Config("no-such-bucket-zarrgate", ""))
	if !errors.Is(err, storesvc.ErrNotFound) || !strings.Contains(err.Error(), "no-such-bucket-zarrgate") {
		t.Errorf("New on a missing bucket: %v", err)
	}
	cfg := srv.Config("no-such-bucket-zarrgate", "")
	cfg.SecretAccessKey = "wrong"
	cfg.SkipBucketCheck = true
	st, err := s3.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Get(ctx, "k", storesvc.ByteRange{})
	if !errors.Is(err, errs.PermissionDenied) {
		t.Errorf("Get with a wrong secret: %v", err)
	}
}

// The atomicity of conditional writes rests on the server honouring
// If-Match / If-None-Match on PutObject, CompleteMultipartUpload and
// DeleteObject. The store's own HEAD pre-checks would hide a server that
// ignores them, so this asks the server directly.
func TestServerConditions(t *testing.T) {
	raw := s3test.NewStore(t, "")
	c, bucket := raw.Client(), aws.String(raw.Config().Bucket)
	put, err := c.PutObject(ctx, &awss3.PutObjectInput{Bucket: bucket, Key: aws.String("k"), Body: strings.NewReader("v")})
	if err != nil {
		t.Fatal(err)
	}
	stale := aws.String(`"0123456789abcdef0123456789abcdef"`)
	_, err = c.PutObject(ctx, &awss3.PutObjectInput{Bucket: bucket, Key: aws.String("k"), Body: strings.NewReader("w"), IfNoneMatch: aws.String("*")})
	wantPrecondition(t, "PutObject If-None-Match *", err)
	_, err = c.PutObject(ctx, &awss3.PutObjectInput{Bucket: bucket, Key: aws.String("k"), Body: strings.NewReader("w"), IfMatch: stale})
	wantPrecondition(t, "PutObject If-Match stale", err)
	complete := func(ifMatch, ifNoneMatch *string) error {
		up, err := c.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{Bucket: bucket, Key: aws.String("k")})
		if err != nil {
			t.Fatal(err)
		}
		part, err := c.UploadPart(ctx, &awss3.UploadPartInput{Bucket: bucket, Key: aws.String("k"), UploadId: up.UploadId, PartNumber: aws.Int32(1), Body: strings.NewReader("x")})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.CompleteMultipartUpload(ctx, &awss3.CompleteMultipartUploadInput{
			Bucket: bucket, Key: aws.String("k"), UploadId: up.UploadId, IfMatch: ifMatch, IfNoneMatch: ifNoneMatch,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: part.ETag}}},
		})
		c.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{Bucket: bucket, Key: aws.String("k"), UploadId: up.UploadId})
		return err
	}
	wantPrecondition(t, "CompleteMultipartUpload If-None-Match *", complete(nil, aws.String("*")))
	wantPrecondition(t, "CompleteMultipartUpload If-Match stale", complete(stale, nil))
	_, err = c.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: bucket, Key: aws.String("k"), IfMatch: stale})
	wantPrecondition(t, "DeleteObject If-Match stale", err)
	if _, err := c.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: bucket, Key: aws.String("k"), IfMatch: put.ETag}); err != nil {
		t.Fatalf("DeleteObject If-Match current: %v", err)
	}
}

func wantPrecondition(t *testing.T, what string, err error) {
	t.Helper()
	var re interface{ HTTPStatusCode() int }
	if !errors.As(err, &re) || re.HTTPStatusCode() != 412 {
		t.Errorf("%s: %v, want 412 Precondition Failed: the server ignores the condition", what, err)
	}
}
