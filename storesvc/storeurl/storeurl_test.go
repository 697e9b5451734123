package storeurl_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/s3/s3test"
	"github.com/zarrgate/zarrgate/storesvc/storeurl"
)

func TestMain(m *testing.M) { s3test.Main(m) }

var ctx = context.Background()

func TestParse(t *testing.T) {
	type L = storeurl.Location
	type F = storeurl.Format
	cases := []struct {
		url  string
		want L
	}{
		{"/abs/dir", L{Backend: storeurl.File, Path: "/abs/dir"}},
		{"rel/dir", L{Backend: storeurl.File, Path: "rel/dir"}},
		{"./data", L{Backend: storeurl.File, Path: "./data"}},
		{`C:\data`, L{Backend: storeurl.File, Path: `C:\data`}},
		{"file:///abs/dir", L{Backend: storeurl.File, Path: "/abs/dir"}},
		{"file://localhost/abs/dir", L{Backend: storeurl.File, Path: "/abs/dir"}},
		{"file:///abs/with%20space", L{Backend: storeurl.File, Path: "/abs/with space"}},
		{"file:///abs/dir?mode=r", L{Backend: storeurl.File, Path: "/abs/dir", ReadOnly: true}},
		{"memory://", L{Backend: storeurl.Memory}},
		{"s3://bucket/some/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1",
			L{Backend: storeurl.S3, Bucket: "bucket", Prefix: "some/prefix", Endpoint: "http://127.0.0.1:9000", Region: "us-east-1", PathStyle: true}},
		{"s3://bucket?endpoint=http://127.0.0.1:9000&path_style=false",
			L{Backend: storeurl.S3, Bucket: "bucket", Endpoint: "http://127.0.0.1:9000"}},
		{"s3://bucket/p/", L{Backend: storeurl.S3, Bucket: "bucket", Prefix: "p"}},
		{"s3://bucket/p?mode=r", L{Backend: storeurl.S3, Bucket: "bucket", Prefix: "p", ReadOnly: true}},
		{"s3://bucket/root#mode=nczarr,s3&awsprofile=unidata",
			L{Backend: storeurl.S3, Bucket: "bucket", Prefix: "root", Profile: "unidata", Format: F{NCZarr: true}}},
		{"https://s3.us-west-1.amazonaws.com/bucket/ds#mode=zarr,s3",
			L{Backend: storeurl.S3, Bucket: "bucket", Prefix: "ds", Endpoint: "https://s3.us-west-1.amazonaws.com", Region: "us-west-1", PathStyle: true, Format: F{PureZarr: true}}},
		{"zip:///path/data.zip", L{Backend: storeurl.Zip, Path: "/path/data.zip"}},
		{"zip:///path/data.zip?mode=r", L{Backend: storeurl.Zip, Path: "/path/data.zip", ReadOnly: true}},
		{"zip:rel/data.zip", L{Backend: storeurl.Zip, Path: "rel/data.zip"}},
		{"file:///x.zip#mode=nczarr,zip", L{Backend: storeurl.Zip, Path: "/x.zip", NCZarrZip: true, Format: F{NCZarr: true}}},
		{"file:///x#mode=nczarr,file", L{Backend: storeurl.File, Path: "/x", Format: F{NCZarr: true}}},
		{"file:///x#mode=zarr,file,v2,noxarray", L{Backend: storeurl.File, Path: "/x", Format: F{PureZarr: true, NoXArray: true, Version: 2}}},
		{"file:///x#mode=zarr&mode=v3", L{Backend: storeurl.File, Path: "/x", Format: F{PureZarr: true, Version: 3}}},
		{"file:///x#mode=xarray,nczarr", L{Backend: storeurl.File, Path: "/x", Format: F{NCZarr: true, XArray: true}}},
	}
	for _, c := range cases {
		got, err := storeurl.Parse(c.url)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.url, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Parse(%q) =\n  %+v, want\n  %+v", c.url, got, c.want)
		}
	}
}

// TestParseS3Addressing: path-style and virtual-hosted S3 URLs, on Amazon
// S3's host names (every documented form) and on other endpoints.
func TestParseS3Addressing(t *testing.T) {
	type L = storeurl.Location
	type F = storeurl.Format
	s3l := func(bucket, prefix, endpoint, region string, pathStyle bool) L {
		return L{Backend: storeurl.S3, Bucket: bucket, Prefix: prefix, Endpoint: endpoint, Region: region, PathStyle: pathStyle}
	}
	cases := []struct {
		url  string
		want L
	}{
		// s3:// with an endpoint: path-style unless asked otherwise.
		{"s3://bucket/prefix?endpoint=https://s3.example.com&virtual_host=true", s3l("bucket", "prefix", "https://s3.example.com", "", false)},
		{"s3://bucket/prefix?endpoint=https://s3.example.com&virtual_host=false", s3l("bucket", "prefix", "https://s3.example.com", "", true)},
		{"s3://bucket/prefix?endpoint=https://s3.example.com&virtual_host=1&path_style=0", s3l("bucket", "prefix", "https://s3.example.com", "", false)},
		{"s3://bucket/prefix?endpoint=https://s3.example.com&path_style=false", s3l("bucket", "prefix", "https://s3.example.com", "", false)},
		{"s3://my.dotted-bucket/p?endpoint=http://127.0.0.1:9000&virtual_host=true&region=eu-central-1", s3l("my.dotted-bucket", "p", "http://127.0.0.1:9000", "eu-central-1", false)},
		// Without an endpoint the SDK addresses AWS virtual-hosted anyway.
		{"s3://bucket/p?virtual_host=true", s3l("bucket", "p", "", "", false)},
		{"s3://Upper_Case/p", s3l("Upper_Case", "p", "", "", false)}, // the SDK falls back to path-style for such names

		// Amazon S3, virtual-hosted: bucket and region from the host name.
		{"https://bucket.s3.us-west-2.amazonaws.com/prefix", s3l("bucket", "prefix", "https://s3.us-west-2.amazonaws.com", "us-west-2", false)},
		{"https://bucket.s3.us-west-2.amazonaws.com/a/b/", s3l("bucket", "a/b", "https://s3.us-west-2.amazonaws.com", "us-west-2", false)},
		{"https://bucket.s3.us-west-2.amazonaws.com", s3l("bucket", "", "https://s3.us-west-2.amazonaws.com", "us-west-2", false)},
		{"https://Bucket.S3.US-West-2.AmazonAWS.com/p", s3l("bucket", "p", "https://s3.us-west-2.amazonaws.com", "us-west-2", false)},
		{"https://my.bucket.name.s3.eu-west-1.amazonaws.com/p", s3l("my.bucket.name", "p", "https://s3.eu-west-1.amazonaws.com", "eu-west-1", false)},
		{"https://bucket.s3-eu-west-1.amazonaws.com/p", s3l("bucket", "p", "https://s3-eu-west-1.amazonaws.com", "eu-west-1", false)},
		{"https://bucket.s3-external-1.amazonaws.com/p", s3l("bucket", "p", "https://s3-external-1.amazonaws.com", "us-east-1", false)},
		{"https://bucket.s3.amazonaws.com/p", s3l("bucket", "p", "https://s3.amazonaws.com", "", false)},
		{"https://bucket.s3.dualstack.ap-southeast-2.amazonaws.com/p", s3l("bucket", "p", "https://s3.dualstack.ap-southeast-2.amazonaws.com", "ap-southeast-2", false)},
		{"https://bucket.s3-fips.us-gov-west-1.amazonaws.com/p", s3l("bucket", "p", "https://s3-fips.us-gov-west-1.amazonaws.com", "us-gov-west-1", false)},
		{"https://bucket.s3-fips.dualstack.us-east-2.amazonaws.com/p", s3l("bucket", "p", "https://s3-fips.dualstack.us-east-2.amazonaws.com", "us-east-2", false)},
		{"https://bucket.s3-accelerate.amazonaws.com/p", s3l("bucket", "p", "https://s3-accelerate.amazonaws.com", "", false)},
		{"https://bucket.s3.cn-north-1.amazonaws.com.cn/p", s3l("bucket", "p", "https://s3.cn-north-1.amazonaws.com.cn", "cn-north-1", false)},
		{"https://bucket.s3.us-west-2.amazonaws.com:443/p", s3l("bucket", "p", "https://s3.us-west-2.amazonaws.com:443", "us-west-2", false)},
		{"http://bucket.s3.us-west-2.amazonaws.com/p", s3l("bucket", "p", "http://s3.us-west-2.amazonaws.com", "us-west-2", false)},
		// A query region wins over the host's; the fragment may be there.
		{"https://bucket.s3.amazonaws.com/p?region=eu-north-1", s3l("bucket", "p", "https://s3.amazonaws.com", "eu-north-1", false)},
		{"https://bucket.s3.us-east-1.amazonaws.com/root#mode=nczarr,s3",
			L{Backend: storeurl.S3, Bucket: "bucket", Prefix: "root", Endpoint: "https://s3.us-east-1.amazonaws.com", Region: "us-east-1", Format: F{NCZarr: true}}},
		{"https://bucket.s3.us-east-1.amazonaws.com/p?mode=r", L{Backend: storeurl.S3, Bucket: "bucket", Prefix: "p", Endpoint: "https://s3.us-east-1.amazonaws.com", Region: "us-east-1", ReadOnly: true}},

		// Amazon S3, path-style.
		{"https://s3.us-west-2.amazonaws.com/bucket/prefix", s3l("bucket", "prefix", "https://s3.us-west-2.amazonaws.com", "us-west-2", true)},
		{"https://s3-us-west-2.amazonaws.com/bucket/prefix", s3l("bucket", "prefix", "https://s3-us-west-2.amazonaws.com", "us-west-2", true)},
		{"https://s3.amazonaws.com/bucket", s3l("bucket", "", "https://s3.amazonaws.com", "", true)},
		{"https://s3.dualstack.eu-west-3.amazonaws.com/bucket/p", s3l("bucket", "p", "https://s3.dualstack.eu-west-3.amazonaws.com", "eu-west-3", true)},
		{"https://s3.us-west-2.amazonaws.com/bucket/p?virtual_host=true", s3l("bucket", "p", "https://s3.us-west-2.amazonaws.com", "us-west-2", false)},

		// Other endpoints: path-style, or virtual-hosted with virtual_host=true.
		{"https://s3.example.com/bucket/p#mode=zarr,s3",
			L{Backend: storeurl.S3, Bucket: "bucket", Prefix: "p", Endpoint: "https://s3.example.com", PathStyle: true, Format: F{PureZarr: true}}},
		{"https://bucket.s3.example.com/p/q?virtual_host=true#mode=zarr,s3",
			L{Backend: storeurl.S3, Bucket: "bucket", Prefix: "p/q", Endpoint: "https://s3.example.com", Format: F{PureZarr: true}}},
		{"http://bucket.localhost:7070/p?virtual_host=true&region=us-east-1#mode=s3",
			L{Backend: storeurl.S3, Bucket: "bucket", Prefix: "p", Endpoint: "http://localhost:7070", Region: "us-east-1"}},
		{"http://bucket.127.0.0.1.nip.example:9000?virtual_host=true#mode=s3",
			L{Backend: storeurl.S3, Bucket: "bucket", Endpoint: "http://127.0.0.1.nip.example:9000"}},
		{"https://s3.example.com/bucket/p?path_style=false#mode=s3", L{Backend: storeurl.S3, Bucket: "bucket", Prefix: "p", Endpoint: "https://s3.example.com"}},
	}
	for _, c := range cases {
		got, err := storeurl.Parse(c.url)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.url, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Parse(%q) =\n  %+v, want\n  %+v", c.url, got, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ url, names string }{
		{"", "empty"},
		{"ftp://host/x", `"ftp"`},
		{"file://otherhost/x", `"otherhost"`},
		{"file://", "no path"},
		{"file:///x#mode=nczarr,s3", `"s3"`},
		{"file:///x#mode=zip,file", `"zip" and "file"`},
		{"file:///x#mode=nczarr,zarr", "both nczarr and zarr"},
		{"file:///x#mode=v2,v3", "both v2 and v3"},
		{"file:///x#mode=zarr,bogus", `"bogus"`},
		{"file:///x#color=blue", `"color"`},
		{"file:///x?cache=1", `"cache"`},
		{"memory://?x=1", `"x"`},
		{"memory://#mode=zip", `"zip"`},
		{"zip:///p.zip?mode=x", `mode="x"`},
		{"zip://host/p.zip", `"host"`},
		{"zip:///p.zip#mode=s3", `"s3"`},
		{"s3:///prefix", "no bucket"},
		{"s3://b/p?endpoint=127.0.0.1:9000", `"127.0.0.1:9000"`},
		{"s3://b/p?path_style=maybe", `"maybe"`},
		{"s3://b/p?timeout=3", `"timeout"`},
		{"s3://b/a//b", `"a//b"`},
		{"s3://b/p#mode=zip", `"zip"`},
		{"https://host/b", "#mode=...,s3"},
		{"https://bucket.s3.example.com/p", "#mode=...,s3"}, // not Amazon's: ambiguous without the fragment
		{"s3://b/p?virtual_host=perhaps", `"perhaps"`},
		{"s3://bucket/p?endpoint=http://h&virtual_host=true&path_style=true", "contradict"},
		{"s3://bucket/p?endpoint=http://h&virtual_host=false&path_style=false", "contradict"},
		{"s3://My_Bucket/p?endpoint=http://h&virtual_host=true", `"My_Bucket"`},
		{"s3://ab/p?endpoint=http://h&virtual_host=true", "3 to 63"},
		{"s3://" + strings.Repeat("b", 64) + "/p?endpoint=http://h&virtual_host=true", "3 to 63"},
		{"s3://-bucket/p?endpoint=http://h&virtual_host=true", `'-'`},
		{"s3://a..b/p?endpoint=http://h&virtual_host=true", "two dots"},
		{"s3://10.1.2.3/p?endpoint=http://h&virtual_host=true", "IP address"},
		{"https://localhost/p?virtual_host=true#mode=zarr,s3", "no bucket label"},
		{"https://BUCKET.s3.us-west-2.amazonaws.com/p#mode=zarr,zip", "Amazon S3 URL is s3 storage"},
		{"http://bucket.s3-website-us-east-1.amazonaws.com/p", "website endpoint"},
		{"http://bucket.s3-website.us-east-2.amazonaws.com/p", "website endpoint"},
		{"https://.s3.us-west-2.amazonaws.com/p", "no bucket"},
		{"https://s3.us-west-2.amazonaws.com/", "no bucket"},
		{"https://ec2.us-west-2.amazonaws.com/b/p", "#mode=...,s3"}, // not S3
		{"https://my_bucket.s3.us-west-2.amazonaws.com/p", `"my_bucket"`},
	}
	for _, c := range cases {
		_, err := storeurl.Parse(c.url)
		if !errors.Is(err, storesvc.ErrInvalidKey) {
			t.Errorf("Parse(%q) = %v, want InvalidArgument", c.url, err)
			continue
		}
		if !strings.Contains(err.Error(), c.names) {
			t.Errorf("Parse(%q) error %q does not name %s", c.url, err, c.names)
		}
	}
}

// Open gives a working store for every backend, read-only for mode=r.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	urls := []string{
		filepath.Join(dir, "plain"),
		"file://" + filepath.Join(dir, "fileurl"),
		"file://" + filepath.Join(dir, "nc.file") + "#mode=nczarr,file",
		"memory://",
		"zip://" + filepath.Join(dir, "data.zip"),
		"file://" + filepath.Join(dir, "nc.zip") + "#mode=nczarr,zip",
	}
	if srv := s3test.Running(); srv != nil {
		bucket, err := srv.CreateBucket(ctx, "storeurl")
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
		t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "none"))
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
		urls = append(urls, fmt.Sprintf("s3://%s/pre/fix?endpoint=%s&region=us-east-1", bucket, srv.Endpoint))
	}
	for _, u := range urls {
		s, err := storeurl.Open(ctx, u)
		if err != nil {
			t.Errorf("Open(%q): %v", u, err)
			continue
		}
		if _, err := s.Set(ctx, "a/b", strings.NewReader("v"), storesvc.Condition{}); err != nil {
			t.Errorf("%s: Set: %v", u, err)
		}
		if v, _, err := storesvc.ReadAll(ctx, s, "a/b"); err != nil || string(v) != "v" {
			t.Errorf("%s: ReadAll = %q, %v", u, v, err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("%s: Close: %v", u, err)
		}
		if strings.HasPrefix(u, "memory:") {
			continue
		}
		ro := u + "?mode=r"
		if strings.Contains(u, "?") {
			ro = strings.Replace(u, "?", "?mode=r&", 1)
		} else if i := strings.Index(u, "#"); i >= 0 {
			ro = u[:i] + "?mode=r" + u[i:]
		}
		if !strings.Contains(u, "://") {
			continue // plain paths take no query
		}
		s, err = storeurl.Open(ctx, ro)
		if err != nil {
			t.Errorf("Open(%q): %v", ro, err)
			continue
		}
		if v, _, err := storesvc.ReadAll(ctx, s, "a/b"); err != nil || string(v) != "v" {
			t.Errorf("%s: ReadAll = %q, %v", ro, v, err)
		}
		if _, err := s.Set(ctx, "a/b", strings.NewReader("w"), storesvc.Condition{}); !errors.Is(err, storesvc.ErrPrecondition) {
			t.Errorf("%s: Set on read-only store: %v", ro, err)
		}
		s.Close()
	}
}
