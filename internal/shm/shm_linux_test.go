package shm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSegmentAttach(t *testing.T) {
	if !Supported {
		t.Skip("no shared memory segments on this platform")
	}
	seg, err := Create(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	copy(seg.Data[DataOffset:], "hello")
	m, err := Attach(seg.Path, 1<<16, seg.Token)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data[DataOffset:DataOffset+5]) != "hello" {
		t.Fatalf("client sees %q", m.Data[DataOffset:DataOffset+5])
	}
	// What the gateway writes later is seen through the client's mapping,
	// and the mapping outlives the gateway's.
	copy(seg.Data[DataOffset:], "world")
	if string(m.Data[DataOffset:DataOffset+5]) != "world" {
		t.Fatalf("client sees %q after a write", m.Data[DataOffset:DataOffset+5])
	}
	if err := seg.Close(); err != nil {
		t.Fatal(err)
	}
	if string(m.Data[DataOffset:DataOffset+5]) != "world" {
		t.Fatal("mapping lost after the segment closed")
	}
	m.Close()
	if _, err := Attach(seg.Path, 1<<16, seg.Token); err == nil {
		t.Fatal("attached a closed segment")
	}

	// A wrong token, a wrong size, a FIFO and a missing file are refused.
	seg2, err := Create(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer seg2.Close()
	bad := append([]byte(nil), seg2.Token...)
	bad[0] ^= 1
	if _, err := Attach(seg2.Path, 1<<16, bad); err == nil {
		t.Fatal("attached with a wrong token")
	}
	if _, err := Attach(seg2.Path, 1<<17, seg2.Token); err == nil {
		t.Fatal("attached with a wrong size")
	}
	dir := t.TempDir()
	fifo := dir + "/fifo"
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Attach(fifo, 1<<16, seg2.Token); err == nil {
		t.Fatal("attached a FIFO")
	}
	if _, err := Attach(dir+"/missing", 1<<16, seg2.Token); err == nil {
		t.Fatal("attached a missing file")
	}
}

// TestSegmentAttachWritable: a codec worker's read-write mapping writes
// into the gateway's segment, and is refused like a read-only one with a
// wrong token, size or a size past MaxAttachBytes.
func TestSegmentAttachWritable(t *testing.T) {
	seg, err := CreateSealed(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	m, err := AttachWritable(seg.Path, 1<<16, seg.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	copy(m.Data[DataOffset:], "decoded")
	if string(seg.Data[DataOffset:DataOffset+7]) != "decoded" {
		t.Fatalf("gateway sees %q", seg.Data[DataOffset:DataOffset+7])
	}
	bad := append([]byte(nil), seg.Token...)
	bad[1] ^= 1
	if _, err := AttachWritable(seg.Path, 1<<16, bad); err == nil {
		t.Fatal("attached with a wrong token")
	}
	if _, err := AttachWritable(seg.Path, 1<<15, seg.Token); err == nil {
		t.Fatal("attached with a wrong size")
	}
	if _, err := AttachWritable(seg.Path, MaxAttachBytes+1, seg.Token); err == nil {
		t.Fatal("attached with a huge size")
	}
}

// A writable mapping is only of an anonymous memory file: a regular file
// of the host (on disk, or on tmpfs with a name) that starts with the
// token and has the size is refused, through its path or through
// /proc/self/fd.
func TestAttachWritableOnlyMemoryFiles(t *testing.T) {
	seg, err := CreateSealed(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	for _, dir := range []string{t.TempDir(), "/dev/shm"} {
		f, err := os.CreateTemp(dir, "segment")
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(f.Name())
		defer f.Close()
		f.Write(seg.Data) // the token, and the size
		for _, path := range []string{f.Name(), fmt.Sprintf("/proc/self/fd/%d", f.Fd()), fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd())} {
			if m, err := AttachWritable(path, 1<<16, seg.Token); err == nil {
				m.Close()
				t.Errorf("%s (%s) attached read-write", path, f.Name())
			}
		}
		// Read-only (a client of ReadSlabShared) it may be mapped.
		m, err := Attach(f.Name(), 1<<16, seg.Token)
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
	}
	// A descriptor that leads to a device or a FIFO is not even opened
	// read-write: refused on where it leads, before the open.
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{os.DevNull, fifo} {
		f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		path := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd())
		if m, err := AttachWritable(path, 1<<16, seg.Token); err == nil {
			m.Close()
			t.Errorf("%s (%s) attached read-write", path, name)
		} else if !strings.Contains(err.Error(), "not a memory file") {
			t.Errorf("%s (%s): %v, want it refused before it is opened (not a memory file)", path, name, err)
		}
	}
}

// A writable mapping is only of a memory file sealed against shrinking:
// one its owner could truncate while the worker writes into it would
// fault the worker. A segment of CreateSealed cannot be truncated; one of
// Create (ReadSlabShared's, which a client must not be able to name as its
// destination: OpenDest wants seals) is refused.
func TestAttachWritableOnlySealed(t *testing.T) {
	seg, err := CreateSealed(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	if err := seg.f.Truncate(1 << 12); err == nil {
		t.Fatal("a segment could be shrunk")
	}
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "unsealed")
	defer f.Close()
	f.Write(seg.Data)
	path := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd())
	if m, err := AttachWritable(path, 1<<16, seg.Token); err == nil {
		m.Close()
		t.Fatal("an unsealed memory file attached read-write")
	}
	if m, err := AttachWritable(seg.Path, 1<<16, seg.Token); err != nil {
		t.Fatalf("a segment of CreateSealed: %v", err)
	} else {
		m.Close()
	}
	plain, err := Create(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if m, err := AttachWritable(plain.Path, 1<<16, plain.Token); err == nil {
		m.Close()
		t.Fatal("an unsealed segment of Create attached read-write")
	}
}
