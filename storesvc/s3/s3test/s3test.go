// Package s3test runs a real S3-compatible server (versitygw, posix
// backend) on 127.0.0.1 for tests and benchmarks.
//
// The binary is found, in order, at $ZARRGATE_VERSITYGW, at
// $ZARRGATE_CACHE/versitygw, and at <repo>/.cache/bin/versitygw. If it is
// missing, Start builds it there with `go install` (about 1.5 minutes),
// unless ZARRGATE_S3_REQUIRED=1: then a missing binary is an error, so CI
// cannot silently skip the S3 tests. scripts/s3server.sh builds the same
// binary ahead of time.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/zarrgate/zarrgate/storesvc/s3"
)

// Version is the versitygw release the tests run against.
const Version = "v1.8.0"

// Credentials of the test server's root account.
const (
	AccessKey = "zarrgate-test"
	SecretKey = "zarrgate-test-secret"
)

// Required reports whether ZARRGATE_S3_REQUIRED=1: tests must fail, not
// skip, when no server can be started.
func Required() bool { return os.Getenv("ZARRGATE_S3_REQUIRED") == "1" }

// CacheDir is where the server binary lives: $ZARRGATE_CACHE, else
// <repo>/.cache/bin.
func CacheDir() (string, error) {
	if d := os.Getenv("ZARRGATE_CACHE"); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, ".cache", "bin"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("s3test: no go.mod above the working directory; set ZARRGATE_CACHE")
		}
		dir = parent
	}
}

var buildOnce sync.Once

// Binary returns the path of the versitygw binary, building it into the
// cache directory when it is missing and ZARRGATE_S3_REQUIRED is not set.
func Binary() (string, error) {
	if p := os.Getenv("ZARRGATE_VERSITYGW"); p != "" {
		return p, nil
	}
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "versitygw")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if Required() {
		return "", fmt.Errorf("s3test: %s is missing and ZARRGATE_S3_REQUIRED=1; build it with scripts/s3server.sh build", bin)
	}
	var buildErr error
	buildOnce.Do(func() {
		fmt.Fprintf(os.Stderr, "s3test: building versitygw %s into %s (about 1.5 minutes)...\n", Version, dir)
		cmd := exec.Command("go", "install", "github.com/versity/versitygw/cmd/versitygw@"+Version)
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-buildvcs=false")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("s3test: building versitygw: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		return "", buildErr
	}
	return bin, nil
}

// Server is a running versitygw.
type Server struct {
	Endpoint string // http://127.0.0.1:PORT
	cmd      *exec.Cmd
	dir      string
	logs     *os.File
	done     chan struct{}
}

// Start starts a server on a free 127.0.0.1 port over a fresh temporary
// directory and waits until it answers.
func Start() (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "zarrgate-s3-")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		return nil, err
	}
	logs, err := os.Create(filepath.Join(dir, "versitygw.log"))
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 { // the free port may be taken between probe and start
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		cmd := exec.Command(bin, "--port", addr, "posix", data)
		cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+AccessKey, "ROOT_SECRET_KEY="+SecretKey)
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		s := &Server{Endpoint: "http://" + addr, cmd: cmd, dir: dir, logs: logs, done: make(chan struct{})}
		go func() { cmd.Wait(); close(s.done) }()
		if lastErr = s.waitReady(addr); lastErr == nil {
			return s, nil
		}
		s.kill()
	}
	logs.Close()
	out, _ := os.ReadFile(filepath.Join(dir, "versitygw.log"))
	os.RemoveAll(dir)
	return nil, fmt.Errorf("s3test: versitygw did not start: %v\n%s", lastErr, out)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady waits until the server lists buckets.
func (s *Server) waitReady(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := s.client(ctx)
	if err != nil {
		return err
	}
	for {
		select {
		case <-s.done:
			return errors.New("server exited")
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			if _, err := client.ListBuckets(ctx, &awss3.ListBucketsInput{}); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Server) client(ctx context.Context) (*awss3.Client, error) {
	st, err := s3.New(ctx, s.Config("unused", ""))
	if err != nil {
		return nil, err
	}
	return st.Client(), nil
}

func (s *Server) kill() {
	s.cmd.Process.Kill()
	<-s.done
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() {
	s.kill()
	s.logs.Close()
	os.RemoveAll(s.dir)
}

// Config returns a store configuration for bucket and prefix on this
// server, with static credentials and path-style addressing.
func (s *Server) Config(bucket, prefix string) s3.Config {
	return s3.Config{
		Bucket: bucket, Prefix: prefix, Endpoint: s.Endpoint, Region: "us-east-1", PathStyle: true,
		AccessKeyID: AccessKey, SecretAccessKey: SecretKey, SkipBucketCheck: bucket == "unused",
	}
}

// CreateBucket creates a bucket with a fresh random name starting with
// hint, and returns the name.
func (s *Server) CreateBucket(ctx context.Context, hint string) (string, error) {
	var b [4]byte
	rand.Read(b[:])
	name := strings.ToLower(hint)
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, name)
	if len(name) > 40 {
		name = name[:40]
	}
	name = strings.Trim(name, "-") + "-" + hex.EncodeToString(b[:])
	client, err := s.client(ctx)
	if err != nil {
		return "", err
	}
	if _, err := client.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return "", fmt.Errorf("create bucket %q: %w", name, err)
	}
	return name, nil
}

// Main runs a package's tests with one server, available through Current.
// Without a server the tests that call Current are skipped, or, with
// ZARRGATE_S3_REQUIRED=1, the run fails.
func Main(m *testing.M) {
	srv, err := Start()
	if err != nil {
		if Required() {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		startErr = err
	}
	current = srv
	code := m.Run()
	if srv != nil {
		srv.Stop()
	}
	os.Exit(code)
}

var (
	current  *Server
	startErr error
)

// Current returns the server Main started, or skips the test.
func Current(tb testing.TB) *Server {
	tb.Helper()
	if current == nil {
		if startErr == nil {
			startErr = errors.New("s3test.Main was not called")
		}
		tb.Skipf("no S3 server: %v", startErr)
	}
	return current
}

// Running returns the server Main started, or nil.
func Running() *Server { return current }

// NewStore returns a store on a fresh bucket of the current server, under
// prefix ("" for none), closed when the test ends.
func NewStore(tb testing.TB, prefix string) *s3.Store {
	tb.Helper()
	srv := Current(tb)
	ctx := context.Background()
	bucket, err := srv.CreateBucket(ctx, tb.Name())
	if err != nil {
		tb.Fatal(err)
	}
	st, err := s3.New(ctx, srv.Config(bucket, prefix))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}
