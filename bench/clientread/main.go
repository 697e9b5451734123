// Command clientread measures the Go client's CPU per full read of an
// array through the socket (shared memory off: over the bulk connection
// when the gateway has a listener, WithBulk(false) with -stream): a first
// ReadInto of the whole array into a float32 slice, then -n more timed,
// each printed with its MB/s and the process's CPU time (all threads,
// getrusage), optionally under a CPU profile. For comparing client
// builds against one running gateway (docs/benchmarks.md, issue 20).
//
//	go run ./bench/clientread -addr 127.0.0.1:PORT -path zstd [-n 5] [-prof cpu.prof]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/zarrgate/zarrgate/client"
)

// cpu is the process's CPU time so far, user and system, all threads.
func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	addr := flag.String("addr", "", "the gateway (host:port)")
	path := flag.String("path", "zstd", "the array, float32")
	n := flag.Int("n", 5, "timed reads")
	prof := flag.String("prof", "", "write a CPU profile of the timed reads here")
	stream := flag.Bool("stream", false, "blocks through the gRPC stream, not the bulk connection")
	flag.Parse()
	ctx := context.Background()
	c, err := client.Dial(ctx, *addr, client.WithSharedMemory(false), client.WithBulk(!*stream))
	if err != nil {
		log.Fatal(err)
	}
	a, err := c.OpenArray(ctx, *path)
	if err != nil {
		log.Fatal(err)
	}
	dst := make([]float32, a.Shape[0]*a.Shape[1])
	if err := client.ReadInto(ctx, a, nil, dst); err != nil {
		log.Fatal(err)
	}
	if *prof != "" {
		f, err := os.Create(*prof)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	for range *n {
		t0, c0 := time.Now(), cpu()
		if err := client.ReadInto(ctx, a, nil, dst); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%.0f MB/s cpu %.1f ms\n", float64(len(dst)*4)/time.Since(t0).Seconds()/1e6, float64(cpu()-c0)/1e6)
	}
}
