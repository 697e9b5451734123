package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	codecv1 "github.com/zarrgate/zarrgate/gen/zarrgate/codec/v1"
	storev1 "github.com/zarrgate/zarrgate/gen/zarrgate/store/v1"
	"github.com/zarrgate/zarrgate/internal/rpc"
)

// These tests drive the policy with grants to anonymous (servers without
// authentication); auth_test.go drives it with tokens and client
// certificates, and the rest of the matrix runs in
// internal/authz/authzgrpc.

func writePolicy(t *testing.T, path, doc string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func setKey(ctx context.Context, st storev1.StoreServiceClient, key string) error {
	s, err := st.Set(ctx)
	if err != nil {
		return err
	}
	if err := s.Send(&storev1.SetRequest{Header: &storev1.SetHeader{Key: key}, Data: []byte("v")}); err != nil && err != io.EOF {
		return err
	}
	_, err = s.CloseAndRecv()
	return err
}

// TestServePolicy: serve with --policy and --audit-log refuses what the
// policy does not grant, without touching the store, filters listings,
// records writes and denials as JSON lines, and reloads the policy when
// the file changes, keeping it when the new file is invalid.
func TestServePolicy(t *testing.T) {
	dir := t.TempDir()
	root, policy, audit := filepath.Join(dir, "data"), filepath.Join(dir, "policy.yaml"), filepath.Join(dir, "audit.log")
	os.MkdirAll(filepath.Join(root, "secret"), 0o755)
	os.WriteFile(filepath.Join(root, "secret", "k"), []byte("s"), 0o644)
	writePolicy(t, policy, "rules:\n  - principals: [anonymous]\n    permissions: [read, write]\n    prefixes: [public]\n")
	s := startServer(t, "--root", root, "--policy", policy, "--audit-log", audit)
	conn, err := rpc.Dial(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st := storev1.NewStoreServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if err := setKey(ctx, st, "public/a"); err != nil {
		t.Fatal(err)
	}
	err = setKey(ctx, st, "secret/a")
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `"write" permission on "secret/a"`) {
		t.Fatalf("Set secret/a: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "secret", "a")); !os.IsNotExist(err) {
		t.Fatalf("a refused Set wrote: %v", err)
	}
	_, err = st.ErasePrefix(ctx, &storev1.ErasePrefixRequest{Prefix: ""})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ErasePrefix(\"\"): %v", err)
	}
	l, err := st.List(ctx, &storev1.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for {
		r, err := l.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, r.GetKeys()...)
	}
	if strings.Join(keys, ",") != "public/a" {
		t.Errorf("List shows %v, want [public/a]", keys)
	}

	// Audit records: one JSON object per line.
	data, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		recs = append(recs, m)
	}
	if len(recs) != 3 || recs[0]["code"] != "OK" || recs[1]["denied"] != true || recs[1]["principal"] != "anonymous" ||
		recs[2]["method"] != "/zarrgate.store.v1.StoreService/ErasePrefix" || recs[2]["permission"] != "admin" || recs[2]["logger"] != "zarrgate.audit" {
		t.Errorf("audit log:\n%s", data)
	}
	if strings.Contains(s.logs.String(), `"logger":"zarrgate.audit"`) {
		t.Error("audit records in the access log")
	}

	// An invalid new version is logged and ignored.
	writePolicy(t, policy, "rules:\n  - principals: [anonymous]\n    permissions: [read, write, destroy]\n    prefixes: [\"\"]\n")
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(s.logs.String(), "invalid policy file") {
		if time.Now().After(deadline) {
			t.Fatal("no log of the invalid policy")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := setKey(ctx, st, "secret/b"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("after an invalid policy: %v", err)
	}
	if err := setKey(ctx, st, "public/b"); err != nil {
		t.Fatalf("after an invalid policy: %v", err)
	}
	// A valid one takes effect.
	writePolicy(t, policy, "rules:\n  - principals: [anonymous]\n    permissions: [read, write]\n    prefixes: [public, secret]\n")
	for setKey(ctx, st, "secret/c") != nil {
		if time.Now().After(deadline) {
			t.Fatal("the new policy did not take effect")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCodecWorkerPolicy: with a policy, a codec worker refuses anonymous
// callers; --audit-log - writes the records to stderr under their own
// logger name.
func TestCodecWorkerPolicy(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.json")
	writePolicy(t, policy, `{"rules": []}`)
	s := startCommand(t, "codec-worker", "--policy", policy, "--audit-log", "-")
	conn, err := rpc.Dial(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = codecv1.NewCodecServiceClient(conn).Encode(ctx, &codecv1.EncodeRequest{})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("anonymous Encode: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.logs.String(), `"logger":"zarrgate.audit"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no audit record on stderr:\n%s", s.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBadPolicyAtStartup: a serving command with an invalid policy file or
// an unusable audit log does not start, and says why.
func TestBadPolicyAtStartup(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	writePolicy(t, bad, "rules:\n  - principals: [user:a]\n    permissions: [read]\n    prefixes: [a/../b]\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--root", dir, "--policy", bad}, `bad.yaml: rule 1: prefix "a/../b"`},
		{[]string{"store-worker", "--root", dir, "--policy", filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
		{[]string{"codec-worker", "--policy", dir}, "policy"},
		{[]string{"serve", "--root", dir, "--audit-log", filepath.Join(dir, "no", "such", "dir", "audit.log")}, "--audit-log"},
	} {
		cmd := exec.Command(bin, append(c.args, "--listen", "127.0.0.1:0")...)
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 1 {
			t.Errorf("zarrgate %q: %v, want exit code 1\n%s", c.args, err, out)
		}
		if !strings.Contains(string(out), c.want) || strings.Contains(string(out), "serving") {
			t.Errorf("zarrgate %q: output does not say %q:\n%s", c.args, c.want, out)
		}
	}
}
