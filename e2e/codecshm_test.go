package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A codec worker on the gateway's host, over a unix socket or loopback
// TCP, takes the gateway's offer of shared memory (the gateway logs it and
// counts the chunks answered so), and strided, boxed and full reads
// through it return what was written;
// with the mode turned off on either side the streams carry bytes and the
// reads are the same.
func TestCodecWorkerSharedMemory(t *testing.T) {
	root := t.TempDir()
	store := startCommand(t, "store-worker", "--root", root)
	sock := filepath.Join(t.TempDir(), "codec.sock")
	unixWorker := startCmd(t, exec.Command(bin, "codec-worker", "--listen", "unix://"+sock))
	tcpWorker := startCommand(t, "codec-worker")
	offWorker := startCommand(t, "codec-worker", "--shared-memory=false")
	for _, c := range []struct {
		name, worker string
		extra        []string
		want         string
	}{
		{"unix", unixWorker.addr, nil, "the worker attached shared memory"},
		{"tcp", tcpWorker.addr, nil, "the worker attached shared memory"},
		{"gateway-off", tcpWorker.addr, []string{"--codec-shared-memory-bytes", "0"}, ""},
		{"worker-off", offWorker.addr, nil, "the worker declined shared memory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw := startWithAdmin(t, "gateway", true, append([]string{"--store", store.addr, "--codec", c.worker}, c.extra...)...)
			testOffloadedPartialReads(t, gw.addr, "shm-"+c.name)
			m := gw.scrape(t)
			chunks, streams := m["zarrgate_codec_shared_memory_chunks_total{}"], m["zarrgate_codec_shared_memory_streams_total{}"]
			if on := c.want == "the worker attached shared memory"; on != (chunks > 0) || on != (streams > 0) {
				t.Fatalf("%v chunks on %v streams through shared memory", chunks, streams)
			}
			logs := gw.logs.String()
			// The line was written before the reads' answers; give the
			// log's reader a moment to catch up.
			for deadline := time.Now().Add(5 * time.Second); c.want != "" && !strings.Contains(logs, c.want) && time.Now().Before(deadline); logs = gw.logs.String() {
				time.Sleep(10 * time.Millisecond)
			}
			if c.want != "" && !strings.Contains(logs, c.want) {
				t.Fatalf("the gateway did not log %q:\n%s", c.want, logs)
			}
			if c.want == "" && strings.Contains(logs, "shared memory") {
				t.Fatalf("with the mode off, the gateway logged about shared memory:\n%s", logs)
			}
			if c.name == "worker-off" && !strings.Contains(logs, "turned off on this worker") {
				t.Fatalf("the decline does not say why:\n%s", logs)
			}
		})
	}
}
