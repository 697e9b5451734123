package storeurl_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/zarrgate/zarrgate/storesvc"
	"github.com/zarrgate/zarrgate/storesvc/s3"
	"github.com/zarrgate/zarrgate/storesvc/s3/s3test"
	"github.com/zarrgate/zarrgate/storesvc/storeurl"
)

// startVirtualGW starts versitygw on 127.0.0.1 with virtual-hosted bucket
// addressing under domain, and returns its port.
func startVirtualGW(t *testing.T, domain string) int {
	t.Helper()
	bin, err := s3test.Binary()
	if err != nil {
		if s3test.Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	data := t.TempDir()
	for range 5 { // the free port may be taken between probe and start
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		cmd := exec.Command(bin, "--port", fmt.Sprintf("127.0.0.1:%d", port), "--virtual-domain", domain, "posix", data)
		cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s3test.AccessKey, "ROOT_SECRET_KEY="+s3test.SecretKey)
		logs, _ := os.Create(filepath.Join(t.TempDir(), "versitygw.log"))
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			select {
			case <-done:
			default:
				if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
					c.Close()
					t.Cleanup(func() { cmd.Process.Kill(); <-done; logs.Close() })
					return port
				}
				continue
			}
			break
		}
		cmd.Process.Kill()
		<-done
	}
	t.Fatal("versitygw did not start")
	return 0
}

// hostRecorder is an HTTP client that connects every request to 127.0.0.1
// (no resolver here maps *.localhost to loopback) and records the Host
// and path each request was sent with.
type hostRecorder struct {
	mu   sync.Mutex
	seen []string
	rt   http.RoundTripper
}

func (h *hostRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	host := r.Host // what the Host header carries: URL.Host unless set
	if host == "" {
		host = r.URL.Host
	}
	h.mu.Lock()
	h.seen = append(h.seen, host+" "+r.URL.Path)
	h.mu.Unlock()
	return h.rt.RoundTrip(r)
}

func loopbackClient(port int) (*http.Client, *hostRecorder) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", port))
	}
	rec := &hostRecorder{rt: tr}
	return &http.Client{Transport: rec}, rec
}

// TestVirtualHostedS3 opens a virtual-hosted S3 URL against a real S3
// server (versitygw with --virtual-domain localhost): every request names
// the bucket in the Host header, none in the path, and what is written
// through it is in the bucket the host name names (read back path-style).
func TestVirtualHostedS3(t *testing.T) {
	port := startVirtualGW(t, "localhost")
	// Hermetic: no shared AWS configuration, and no CA bundle (the SDK
	// refuses one with a caller's HTTP client; this server is plain HTTP).
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_CA_BUNDLE", "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	creds := func(cfg s3.Config, client *http.Client) s3.Config {
		cfg.AccessKeyID, cfg.SecretAccessKey, cfg.HTTPClient = s3test.AccessKey, s3test.SecretKey, client
		return cfg
	}
	// The bucket, created path-style.
	pathLoc, err := storeurl.Parse(fmt.Sprintf("s3://zarrgate-vh/pre/fix?endpoint=http://127.0.0.1:%d&region=us-east-1", port))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := loopbackClient(port)
	pcfg := creds(pathLoc.S3Config(), plain)
	pcfg.SkipBucketCheck = true
	ps, err := s3.New(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Client().CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String("zarrgate-vh")}); err != nil {
		t.Fatal(err)
	}

	for _, raw := range []string{
		fmt.Sprintf("http://zarrgate-vh.localhost:%d/pre/fix?virtual_host=true&region=us-east-1#mode=s3", port),
		fmt.Sprintf("s3://zarrgate-vh/pre/fix?endpoint=http://localhost:%d&virtual_host=true&region=us-east-1", port),
	} {
		loc, err := storeurl.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		client, rec := loopbackClient(port)
		vs, err := s3.New(ctx, creds(loc.S3Config(), client))
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		s := storesvc.Wrap(vs)
		value := "written virtual-hosted via " + raw
		if _, err := s.Set(ctx, "a/b", strings.NewReader(value), storesvc.Condition{}); err != nil {
			t.Fatalf("%s: Set: %v", raw, err)
		}
		if v, _, err := storesvc.ReadAll(ctx, s, "a/b"); err != nil || string(v) != value {
			t.Fatalf("%s: ReadAll = %q, %v", raw, v, err)
		}
		var keys []string
		for k, err := range s.ListPrefix(ctx, "") {
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		if strings.Join(keys, ",") != "a/b" {
			t.Fatalf("%s: keys %v", raw, keys)
		}
		rec.mu.Lock()
		for _, hp := range rec.seen {
			host, path, _ := strings.Cut(hp, " ")
			if host != fmt.Sprintf("zarrgate-vh.localhost:%d", port) || strings.HasPrefix(path, "/zarrgate-vh") {
				t.Errorf("%s: request to host %q path %q, want the bucket in the host only", raw, host, path)
			}
		}
		if len(rec.seen) < 3 {
			t.Errorf("%s: %d requests seen", raw, len(rec.seen))
		}
		rec.mu.Unlock()
		// The object is in bucket zarrgate-vh under pre/fix.
		if v, _, err := storesvc.ReadAll(ctx, storesvc.Wrap(ps), "a/b"); err != nil || string(v) != value {
			t.Fatalf("%s: path-style read of what was written = %q, %v", raw, v, err)
		}
		vs.Close()
	}
	// An unknown bucket in the host name is NotFound, not another bucket.
	loc, _ := storeurl.Parse(fmt.Sprintf("http://no-such-bucket.localhost:%d/p?virtual_host=true&region=us-east-1#mode=s3", port))
	client, _ := loopbackClient(port)
	if _, err := s3.New(ctx, creds(loc.S3Config(), client)); !errors.Is(err, storesvc.ErrNotFound) {
		t.Errorf("unknown bucket: %v, want NotFound", err)
	}
}
