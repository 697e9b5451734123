package shm

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain runs destHelper when the test binary is started as another
// process holding a destination (ZARRGATE_DEST_HELPER set).
func TestMain(m *testing.M) {
	if os.Getenv("ZARRGATE_DEST_HELPER") != "" {
		destHelper()
		return
	}
	os.Exit(m.Run())
}

// destHelper makes a 1 MiB destination, prints "pid fd token", then
// waits for its standard input to close.
func destHelper() {
	d, err := NewDest(1 << 20)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println(d.Pid, d.Fd, hex.EncodeToString(d.Token))
	bufio.NewReader(os.Stdin).ReadString('\n')
}

// otherProcess starts destHelper in another process and returns its
// destination's pid, fd and token.
func otherProcess(t *testing.T) (int, int, []byte) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ZARRGATE_DEST_HELPER=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var pid, fd int
	var tok string
	if _, err := fmt.Sscan(line, &pid, &fd, &tok); err != nil {
		t.Fatalf("helper said %q: %v", line, err)
	}
	token, _ := hex.DecodeString(tok)
	return pid, fd, token
}

func TestDestRoundTrip(t *testing.T) {
	d, err := NewDest(10000)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if len(d.Data()) != 10000 {
		t.Fatalf("data has %d bytes", len(d.Data()))
	}
	m, err := OpenDest(d.Pid, d.Fd, 10000, d.Token)
	if err != nil {
		t.Fatal(err)
	}
	copy(m.Data, "hello")
	m.Data[9999] = 7
	m.Close()
	if string(d.Data()[:5]) != "hello" || d.Data()[9999] != 7 {
		t.Fatal("the client does not see the gateway's writes")
	}
	// A smaller need maps less; the token page is never the data.
	m, err = OpenDest(d.Pid, d.Fd, 100, d.Token)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Data) != 100 || cap(m.Data) != 100 || string(m.Data[:5]) != "hello" {
		t.Fatalf("mapped %d bytes (cap %d): %q", len(m.Data), cap(m.Data), m.Data[:5])
	}
	m.Close()
}

func TestDestSealedAgainstTruncation(t *testing.T) {
	d, err := NewDest(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := unix.Ftruncate(d.Fd, 0); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("shrinking a destination: %v, want EPERM", err)
	}
	if err := unix.Ftruncate(d.Fd, 1<<30); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("growing a destination: %v, want EPERM", err)
	}
	if _, err := unix.FcntlInt(uintptr(d.Fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("adding a seal: %v, want EPERM", err)
	}
}

func TestDestOtherProcess(t *testing.T) {
	pid, fd, token := otherProcess(t)
	m, err := OpenDest(pid, fd, 1<<20, token)
	if err != nil {
		t.Fatalf("another process's destination with its token: %v", err)
	}
	m.Close()
	wrong := bytes.Clone(token)
	wrong[0] ^= 1
	if _, err := OpenDest(pid, fd, 1<<20, wrong); !errors.Is(err, ErrDestRefused) || !strings.Contains(err.Error(), "token") {
		t.Fatalf("another process's destination without its token: %v", err)
	}
}

func TestDestRefused(t *testing.T) {
	d, err := NewDest(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// An unsealed memory file holding a token.
	ufd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	uf := os.NewFile(uintptr(ufd), "unsealed")
	defer uf.Close()
	uf.Truncate(DestOffset + 1<<16)
	uf.WriteAt(d.Token, 0)
	// Sealed, but only against growing.
	gfd, _ := unix.MemfdCreate("grow-only", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	gf := os.NewFile(uintptr(gfd), "grow-only")
	defer gf.Close()
	gf.Truncate(DestOffset + 1<<16)
	gf.WriteAt(d.Token, 0)
	unix.FcntlInt(uintptr(gfd), unix.F_ADD_SEALS, unix.F_SEAL_GROW)
	// A file on disk holding the token.
	disk, err := os.Create(t.TempDir() + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer disk.Close()
	disk.Truncate(DestOffset + 1<<16)
	disk.WriteAt(d.Token, 0)
	// The gateway's own segment, with its token.
	seg, err := Create(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	var segFd int
	fmt.Sscanf(seg.Path[strings.LastIndex(seg.Path, "/")+1:], "%d", &segFd)
	// Another user's memory file, sealed, holding the token (root only
	// can give a file away).
	ofd, _ := unix.MemfdCreate("others", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	of := os.NewFile(uintptr(ofd), "others")
	defer of.Close()
	of.Truncate(DestOffset + 1<<16)
	of.WriteAt(d.Token, 0)
	unix.FcntlInt(uintptr(ofd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK)
	given := of.Chown(os.Getuid()+1, -1) == nil
	// Sealed, holding the token, but sparse: its data pages were never
	// allocated, and the gateway's writes would allocate them (charged to
	// the gateway).
	sfd, _ := unix.MemfdCreate("sparse", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	sf := os.NewFile(uintptr(sfd), "sparse")
	defer sf.Close()
	sf.Truncate(DestOffset + 1<<20)
	sf.WriteAt(d.Token, 0)
	unix.FcntlInt(uintptr(sfd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW)
	zeros := make([]byte, TokenBytes)
	other := bytes.Clone(d.Token)
	other[TokenBytes-1] ^= 0x80
	me := os.Getpid()
	for _, c := range []struct {
		name    string
		pid, fd int
		size    int64
		token   []byte
		want    string
	}{
		{"wrong token", me, d.Fd, 1 << 16, other, "token"},
		{"zero token", me, d.Fd, 1 << 16, zeros, "zeros"},
		{"short token", me, d.Fd, 1 << 16, d.Token[:8], "token of 8 bytes"},
		{"too small", me, d.Fd, 1<<16 + 1, d.Token, "want at least"},
		{"huge", me, d.Fd, 1 << 62, d.Token, "out of range"},
		{"negative", me, d.Fd, -1, d.Token, "out of range"},
		{"unsealed", me, ufd, 1 << 16, d.Token, "not sealed against shrinking"},
		{"sealed against growing only", me, gfd, 1 << 16, d.Token, "not sealed against shrinking"},
		{"file on disk", me, int(disk.Fd()), 1 << 16, d.Token, "not a memory file"},
		{"gateway segment", me, segFd, 1 << 10, seg.Token, "not sealed"},
		{"no such descriptor", me, 1 << 20, 1 << 16, d.Token, "no such file"},
		{"no such process", 1 << 30, 3, 1 << 16, d.Token, "no such file"},
		{"bad pid", 0, 3, 1 << 16, d.Token, "process 0"},
		{"another user's file", me, ofd, 1 << 16, d.Token, "belongs to user"},
		{"sparse", me, sfd, 1 << 20, d.Token, "has pages the client has not allocated"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "another user's file" && !given {
				return // not root: no file of another user to hand over
			}
			before := bytes.Clone(d.Data()[:64])
			m, err := OpenDest(c.pid, c.fd, c.size, c.token)
			if err == nil {
				m.Close()
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrDestRefused) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a refusal saying %q", err, c.want)
			}
			if !bytes.Equal(before, d.Data()[:64]) {
				t.Fatal("the destination changed")
			}
			var st unix.Stat_t
			if err := unix.Fstat(sfd, &st); err != nil || st.Blocks*512 > 2*4096 {
				t.Fatalf("the sparse file has %d bytes allocated after the check (%v): the check allocated its pages", st.Blocks*512, err)
			}
		})
	}
}

// A DestCache hands a kept mapping to the next read of the same memory
// file (every check made again: a wrong token is refused and the mapping
// dropped), never to another file, and keeps at most MaxIdle.
func TestDestCache(t *testing.T) {
	c := &DestCache{MaxIdle: 2, IdleFor: time.Hour}
	defer c.Close()
	var ds []*Dest
	for range 3 {
		d, err := NewDest(1 << 16)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		ds = append(ds, d)
	}
	open := func(d *Dest, size int64, token []byte) (*DestMap, error) {
		t.Helper()
		return c.OpenDest(d.Pid, d.Fd, size, token)
	}
	m, err := open(ds[0], 1<<16, ds[0].Token)
	if err != nil {
		t.Fatal(err)
	}
	first := &m.Data[0]
	m.Close()
	if c.Idle() != 1 {
		t.Fatalf("%d kept, want 1", c.Idle())
	}
	// Another file: not the kept mapping.
	m, err = open(ds[1], 1<<16, ds[1].Token)
	if err != nil {
		t.Fatal(err)
	}
	if &m.Data[0] == first {
		t.Fatal("another file's read got the kept mapping")
	}
	m.Data[0] = 1
	if ds[0].Data()[0] != 0 || ds[1].Data()[0] != 1 {
		t.Fatal("wrote to the wrong file")
	}
	m.Close()
	// The same file, smaller: the kept mapping.
	m, err = open(ds[0], 100, ds[0].Token)
	if err != nil {
		t.Fatal(err)
	}
	if &m.Data[0] != first || len(m.Data) != 100 {
		t.Fatal("the same file's read did not get its kept mapping")
	}
	m.Close()
	// A wrong token for a kept file: refused, the mapping dropped.
	wrong := bytes.Clone(ds[0].Token)
	wrong[3] ^= 1
	if _, err := open(ds[0], 1<<16, wrong); !errors.Is(err, ErrDestRefused) {
		t.Fatalf("a kept file with a wrong token: %v", err)
	}
	if c.Idle() != 1 {
		t.Fatalf("%d kept after the refusal, want 1", c.Idle())
	}
	for _, d := range ds {
		m, err := open(d, 1<<16, d.Token)
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
	}
	if c.Idle() != 2 {
		t.Fatalf("%d kept, want at most 2", c.Idle())
	}
}
