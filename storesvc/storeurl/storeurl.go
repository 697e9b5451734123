// Package storeurl opens stores from URLs, including NCZarr's URL
// conventions:
//
//	/abs/dir, rel/dir                      file store (plain paths)
//	file:///abs/dir                        file store
//	memory://                              in-memory store
//	s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1
//	                                       S3; path-style addressing is on
//	                                       when endpoint is set (override
//	                                       with &virtual_host=true, or
//	                                       &path_style=false: the bucket
//	                                       goes in the host name,
//	                                       bucket.127.0.0.1…)
//	zip:///abs/data.zip, zip:data.zip      zip archive, zarr-python layout
//	                                       (?mode=r: read-only)
//	file:///x.zip#mode=nczarr,zip          zip archive, NCZarr layout
//	file:///x#mode=nczarr,file             file store
//	https://host/bucket/prefix#mode=zarr,s3
//	                                       S3 at endpoint https://host
//	https://bucket.host/prefix?virtual_host=true#mode=zarr,s3
//	                                       S3 at endpoint https://host,
//	                                       virtual-hosted
//	https://bucket.s3.us-west-2.amazonaws.com/prefix
//	https://s3.us-west-2.amazonaws.com/bucket/prefix
//	                                       Amazon S3, virtual-hosted or
//	                                       path-style, region us-west-2
//	                                       (no fragment needed)
//	s3://bucket/prefix#mode=nczarr,s3      S3
//
// The fragment holds "&"-separated key=value pairs, as NCZarr's do. Its
// "mode" is a comma-separated list of words: at most one storage word
// (file, zip, s3) picks the backend; the format words (nczarr, zarr,
// noxarray, xarray, v2, v3) do not affect the store and are returned in
// Location.Format for the gateway. "awsprofile=NAME" selects an AWS
// profile. Unknown words and keys are errors, as are conflicting ones.
//
// The zip layouts differ: zarr-python's ZipStore puts key "a/b" at member
// "a/b"; NCZarr (libzip) puts it under a dataset directory, "<dataset>/a/b"
// (see package storesvc/zip). A "zip:" URL means the former, a "#mode=…,zip"
// fragment the latter, as that is what NCZarr writes for such a URL.
//
// Every error matches errs.InvalidArgument and names the bad part.
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/zarrgate/zarrgate/errs"
	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/file"
	"github.com/zarrgate/zarrgate/storesvc/memory"
	"github.com/zarrgate/zarrgate/storesvc/s3"
	"github.com/zarrgate/zarrgate/storesvc/zip"
)

// Backend names a store implementation.
type Backend string

// The backends.
const (
	File   Backend = "file"
	Memory Backend = "memory"
	S3     Backend = "s3"
	Zip    Backend = "zip"
)

// Format holds the format words of an NCZarr mode fragment. The zero value
// says nothing: the gateway infers the format from the stored metadata.
type Format struct {
	// NCZarr is "nczarr": NCZarr's extensions to Zarr.
	NCZarr bool
	// PureZarr is "zarr": plain Zarr, no NCZarr extensions.
	PureZarr bool
	// NoXArray is "noxarray" (and XArray "xarray"): whether to write the
	// _ARRAY_DIMENSIONS attribute.
	NoXArray, XArray bool
	// Version is 2 or 3 for "v2" / "v3", 0 when not given.
	Version int
}

// Location is a parsed store URL.
type Location struct {
	Backend Backend
	// Path is the directory (file) or archive (zip), as given: relative
	// paths stay relative.
	Path string
	// Bucket, Prefix, Endpoint, Region, PathStyle and Profile locate an S3
	// store.
	Bucket, Prefix, Endpoint, Region string
	PathStyle                        bool
	Profile                          string
	// ReadOnly is "?mode=r".
	ReadOnly bool
	// NCZarrZip selects the NCZarr layout of a zip archive.
	NCZarrZip bool
	// Format holds the fragment's format words.
	Format Format
}

func bad(raw, format string, args ...any) error {
	return errs.New(errs.InvalidArgument, "store URL %q: "+format, append([]any{raw}, args...)...)
}

// Parse parses a store URL without opening anything.
func Parse(raw string) (Location, error) {
	if raw == "" {
		return Location{}, bad(raw, "empty")
	}
	scheme, _, hasScheme := strings.Cut(raw, ":")
	if !hasScheme || !isScheme(scheme) || len(scheme) == 1 { // C:\dir is a path
		return Location{Backend: File, Path: raw}, nil // a plain path
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Location{}, bad(raw, "%v", err)
	}
	var loc Location
	storage, err := parseFragment(raw, u.Fragment, &loc)
	if err != nil {
		return Location{}, err
	}
	q := u.Query()
	switch strings.ToLower(u.Scheme) {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return Location{}, bad(raw, "host %q: file URLs name a local path (file:///abs/path)", u.Host)
		}
		if u.Path == "" {
			return Location{}, bad(raw, "no path")
		}
		loc.Path = u.Path
		switch storage {
		case "", "file":
			loc.Backend = File
		case "zip":
			loc.Backend, loc.NCZarrZip = Zip, true
		default:
			return Location{}, bad(raw, "fragment mode %q: a file URL cannot name %s storage", storage, storage)
		}
		if err := parseQuery(raw, q, &loc, true); err != nil {
			return Location{}, err
		}
	case "memory":
		if storage != "" {
			return Location{}, bad(raw, "fragment mode %q: not for memory://", storage)
		}
		loc.Backend = Memory
		if err := parseQuery(raw, q, &loc, false); err != nil {
			return Location{}, err
		}
	case "zip":
		if storage != "" && storage != "zip" {
			return Location{}, bad(raw, "fragment mode %q: a zip URL is zip storage", storage)
		}
		loc.Backend, loc.NCZarrZip = Zip, storage == "zip"
		loc.Path = u.Path
		if u.Opaque != "" {
			loc.Path = u.Opaque // zip:relative/data.zip
		} else if u.Host != "" && u.Host != "localhost" {
			return Location{}, bad(raw, "host %q: zip URLs name a local archive (zip:///abs/data.zip)", u.Host)
		}
		if loc.Path == "" {
			return Location{}, bad(raw, "no archive path")
		}
		if err := parseQuery(raw, q, &loc, true); err != nil {
			return Location{}, err
		}
	case "s3":
		if storage != "" && storage != "s3" {
			return Location{}, bad(raw, "fragment mode %q: an s3 URL is s3 storage", storage)
		}
		loc.Backend = S3
		loc.Bucket, loc.Prefix = u.Host, strings.Trim(u.Path, "/")
		if err := parseS3Query(raw, q, &loc); err != nil {
			return Location{}, err
		}
	case "http", "https":
		loc.Backend = S3
		bucketInHost := false
		aws, err := parseAWSHost(raw, u.Hostname())
		switch {
		case err != nil:
			return Location{}, err
		case aws.ok:
			// Amazon S3's own host names say everything: no fragment needed.
			if storage != "" && storage != "s3" {
				return Location{}, bad(raw, "fragment mode %q: an Amazon S3 URL is s3 storage", storage)
			}
			loc.Region = aws.region
			loc.Endpoint = u.Scheme + "://" + joinPort(aws.endpointHost, u.Port())
			loc.Bucket, bucketInHost = aws.bucket, aws.bucket != ""
		case storage != "s3":
			return Location{}, bad(raw, "%s URLs need the fragment #mode=...,s3 (or an Amazon S3 host name: https://BUCKET.s3.REGION.amazonaws.com/PREFIX)", u.Scheme)
		case isTrue(q.Get("virtual_host")):
			// https://BUCKET.host/PREFIX?virtual_host=true#mode=...,s3: the
			// first label of the host name is the bucket.
			bucket, rest, ok := strings.Cut(u.Hostname(), ".")
			if !ok || rest == "" {
				return Location{}, bad(raw, "virtual_host=true: host %q has no bucket label (want BUCKET.endpoint-host)", u.Hostname())
			}
			loc.Bucket, bucketInHost = bucket, true
			loc.Endpoint = u.Scheme + "://" + joinPort(rest, u.Port())
		default:
			loc.Endpoint = u.Scheme + "://" + u.Host
		}
		path := strings.TrimPrefix(u.Path, "/")
		if bucketInHost {
			loc.Prefix = strings.Trim(path, "/")
		} else {
			bucket, prefix, _ := strings.Cut(path, "/")
			loc.Bucket, loc.Prefix = bucket, strings.Trim(prefix, "/")
		}
		loc.PathStyle = !bucketInHost
		if err := parseS3Query(raw, q, &loc); err != nil {
			return Location{}, err
		}
	default:
		return Location{}, bad(raw, "scheme %q: want file, memory, s3, zip, or http(s) with #mode=...,s3", u.Scheme)
	}
	if loc.Backend == S3 {
		if loc.Bucket == "" {
			return Location{}, bad(raw, "no bucket")
		}
		if loc.Prefix != "" {
			if err := storesvc.ValidateKey(loc.Prefix); err != nil {
				return Location{}, bad(raw, "prefix %q: %v", loc.Prefix, err)
			}
		}
		if !loc.PathStyle && loc.Endpoint != "" {
			// The bucket becomes a host name label.
			if err := validateVirtualBucket(loc.Bucket); err != nil {
				return Location{}, bad(raw, "bucket %q cannot be addressed virtual-hosted (%v): use path-style addressing (path_style=true)", loc.Bucket, err)
			}
		}
	}
	return loc, nil
}

// awsHost is what an Amazon S3 host name says.
type awsHost struct {
	ok bool
	// bucket is the bucket of a virtual-hosted name ("" for path-style).
	bucket string
	// region is the region the name names ("" for the global endpoint).
	region string
	// endpointHost is the host name without the bucket.
	endpointHost string
}

// parseAWSHost recognises Amazon S3's REST endpoint host names, in the
// forms AWS documents (Virtual hosting of buckets; Amazon S3 endpoints):
//
//	BUCKET.s3.REGION.amazonaws.com    virtual-hosted, regional
//	BUCKET.s3-REGION.amazonaws.com    virtual-hosted, legacy dash form
//	BUCKET.s3.amazonaws.com           virtual-hosted, global (legacy)
//	BUCKET.s3.dualstack.REGION.amazonaws.com, BUCKET.s3-fips.REGION…
//	s3.REGION.amazonaws.com, s3-REGION…, s3.amazonaws.com   path-style
//
// and the same under amazonaws.com.cn. The bucket is everything before the
// "s3" label (bucket names may hold dots). Website endpoints
// (s3-website…) do not serve the S3 API and are refused. Other host names
// are not Amazon S3's: ok is false.
func parseAWSHost(raw, host string) (awsHost, error) {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	var rest string
	for _, suffix := range []string{".amazonaws.com", ".amazonaws.com.cn"} {
		if r, ok := strings.CutSuffix(host, suffix); ok {
			rest = r
		}
	}
	if rest == "" {
		return awsHost{}, nil
	}
	labels := strings.Split(rest, ".")
	at := -1
	for i := len(labels) - 1; i >= 0; i-- {
		if labels[i] == "s3" || strings.HasPrefix(labels[i], "s3-") {
			at = i
			break
		}
	}
	if at < 0 {
		return awsHost{}, nil // another AWS service
	}
	s3Label := labels[at]
	if strings.HasPrefix(s3Label, "s3-website") || slices.Contains(labels[at+1:], "s3-website") {
		return awsHost{}, bad(raw, "host %q is an S3 website endpoint, which does not serve the S3 API: use BUCKET.s3.REGION.amazonaws.com", host)
	}
	h := awsHost{ok: true, bucket: strings.Join(labels[:at], "."), endpointHost: strings.Join(labels[at:], ".") + host[len(rest):]}
	// The region is the last label that looks like one (us-west-2,
	// cn-north-1, us-gov-west-1), or the dash form's suffix (s3-us-west-2;
	// s3-external-1 is us-east-1). dualstack, fips and accelerate are not
	// regions.
	for _, l := range labels[at+1:] {
		if isRegion(l) {
			h.region = l
		}
	}
	if r, ok := strings.CutPrefix(s3Label, "s3-"); ok && h.region == "" {
		switch {
		case r == "external-1":
			h.region = "us-east-1"
		case isRegion(r):
			h.region = r
		}
	}
	if h.bucket == "" && at > 0 {
		return awsHost{}, bad(raw, "host %q: no bucket before %q", host, s3Label)
	}
	return h, nil
}

// isRegion reports whether label looks like an AWS region name: letters
// and dashes ending in "-" and a number (us-west-2, ap-southeast-1,
// us-gov-west-1, cn-north-1).
func isRegion(label string) bool {
	i := strings.LastIndexByte(label, '-')
	if i <= 0 || i == len(label)-1 {
		return false
	}
	for _, r := range label[i+1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	for _, r := range label[:i] {
		if (r < 'a' || r > 'z') && r != '-' {
			return false
		}
	}
	return true
}

// validateVirtualBucket checks that bucket can be a host name label, as
// virtual-hosted addressing makes it: S3's bucket naming rules (3 to 63
// characters: lower-case letters, digits, dots and hyphens, beginning and
// ending with a letter or digit, not an IP address).
func validateVirtualBucket(bucket string) error {
	if len(bucket) < 3 || len(bucket) > 63 {
		return errors.New("not 3 to 63 characters")
	}
	for i, r := range bucket {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case (r == '-' || r == '.') && i > 0 && i < len(bucket)-1:
		default:
			return fmt.Errorf("character %q at %d: host name labels take lower-case letters, digits, inner dots and hyphens", r, i)
		}
	}
	if strings.Contains(bucket, "..") {
		return errors.New("two dots in a row")
	}
	if net.ParseIP(bucket) != nil {
		return errors.New("an IP address")
	}
	return nil
}

// joinPort appends ":port" to host when port is not empty.
func joinPort(host, port string) string {
	if port == "" {
		return host
	}
	return net.JoinHostPort(host, port)
}

// isTrue is strconv.ParseBool's truth, false for anything else.
func isTrue(s string) bool {
	b, err := strconv.ParseBool(s)
	return err == nil && b
}

func isScheme(s string) bool {
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// parseFragment reads NCZarr's fragment into loc and returns the storage
// word ("" if none).
func parseFragment(raw, fragment string, loc *Location) (string, error) {
	if fragment == "" {
		return "", nil
	}
	var storage string
	for pair := range strings.SplitSeq(fragment, "&") {
		if pair == "" {
			continue
		}
		key, value, _ := strings.Cut(pair, "=")
		switch strings.ToLower(key) {
		case "mode":
			for word := range strings.SplitSeq(value, ",") {
				word = strings.ToLower(strings.TrimSpace(word))
				f := &loc.Format
				switch word {
				case "file", "zip", "s3":
					if storage != "" && storage != word {
						return "", bad(raw, "fragment mode %q: two storage words, %q and %q", value, storage, word)
					}
					storage = word
				case "nczarr":
					f.NCZarr = true
				case "zarr":
					f.PureZarr = true
				case "noxarray":
					f.NoXArray = true
				case "xarray":
					f.XArray = true
				case "v2", "v3":
					v := int(word[1] - '0')
					if f.Version != 0 && f.Version != v {
						return "", bad(raw, "fragment mode %q: both v2 and v3", value)
					}
					f.Version = v
				case "":
				default:
					return "", bad(raw, "fragment mode %q: unknown word %q (want file, zip, s3, nczarr, zarr, noxarray, xarray, v2, v3)", value, word)
				}
				if f.NCZarr && f.PureZarr {
					return "", bad(raw, "fragment mode %q: both nczarr and zarr", value)
				}
				if f.NoXArray && f.XArray {
					return "", bad(raw, "fragment mode %q: both xarray and noxarray", value)
				}
			}
		case "awsprofile":
			loc.Profile = value
		default:
			return "", bad(raw, "fragment key %q: unknown (want mode or awsprofile)", key)
		}
	}
	return storage, nil
}

// parseQuery accepts "mode" (r: read-only, w) when allowMode, and no other
// key.
func parseQuery(raw string, q url.Values, loc *Location, allowMode bool) error {
	for key, vals := range q {
		if key != "mode" || !allowMode {
			return bad(raw, "query parameter %q: unknown", key)
		}
		switch v := vals[len(vals)-1]; v {
		case "r":
			loc.ReadOnly = true
		case "w", "rw":
		default:
			return bad(raw, "query parameter mode=%q: want r or w", v)
		}
	}
	return nil
}

func parseS3Query(raw string, q url.Values, loc *Location) error {
	pathStyle, virtualHost := "", ""
	for key, vals := range q {
		v := vals[len(vals)-1]
		switch key {
		case "endpoint":
			e, err := url.Parse(v)
			if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
				return bad(raw, "endpoint %q: want http(s)://host[:port]", v)
			}
			loc.Endpoint, loc.PathStyle = v, true
		case "region":
			loc.Region = v
		case "path_style":
			pathStyle = v
		case "virtual_host":
			virtualHost = v
		case "profile", "awsprofile":
			loc.Profile = v
		case "mode":
			if v != "r" && v != "w" && v != "rw" {
				return bad(raw, "query parameter mode=%q: want r or w", v)
			}
			loc.ReadOnly = v == "r"
		default:
			return bad(raw, "query parameter %q: unknown (want endpoint, region, path_style, virtual_host, profile, mode)", key)
		}
	}
	// virtual_host=true is path_style=false: the SDK's UsePathStyle=false,
	// the bucket in the host name (BUCKET.endpoint-host).
	var ps, vh bool
	var err error
	if pathStyle != "" {
		if ps, err = strconv.ParseBool(pathStyle); err != nil {
			return bad(raw, "path_style=%q: want true or false", pathStyle)
		}
		loc.PathStyle = ps
	}
	if virtualHost != "" {
		if vh, err = strconv.ParseBool(virtualHost); err != nil {
			return bad(raw, "virtual_host=%q: want true or false", virtualHost)
		}
		if pathStyle != "" && ps == vh {
			return bad(raw, "path_style=%s and virtual_host=%s contradict each other", pathStyle, virtualHost)
		}
		loc.PathStyle = !vh
	}
	return nil
}

// Open parses raw and opens the store, behind the portable layer
// (read-only for mode=r).
func Open(ctx context.Context, raw string) (storesvc.Store, error) {
	loc, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	return loc.Open(ctx)
}

// S3Config is the configuration of the S3 store at l.
func (l Location) S3Config() s3.Config {
	return s3.Config{
		Bucket: l.Bucket, Prefix: l.Prefix, Endpoint: l.Endpoint, Region: l.Region,
		PathStyle: l.PathStyle, Profile: l.Profile,
	}
}

// Open opens the store at l, behind the portable layer.
func (l Location) Open(ctx context.Context) (storesvc.Store, error) {
	var s storesvc.Store
	var err error
	switch l.Backend {
	case File:
		s, err = file.New(l.Path)
	case Memory:
		s = memory.New()
	case Zip:
		s, err = zip.Open(l.Path, zip.Options{ReadOnly: l.ReadOnly, NCZarr: l.NCZarrZip})
	case S3:
		s, err = s3.New(ctx, l.S3Config())
	default:
		return nil, errs.New(errs.InvalidArgument, "store location: unknown backend %q", l.Backend)
	}
	if err != nil {
		return nil, err
	}
	if l.ReadOnly {
		return storesvc.Wrap(s, storesvc.ReadOnly()), nil
	}
	return storesvc.Wrap(s), nil
}
