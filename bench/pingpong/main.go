// Command pingpong measures what a round trip between two processes costs
// on this machine, without any RPC framework: one byte to a second process
// over loopback TCP and one byte back, n times, with the cores left idle
// for -idle between round trips (as a caller's are while the server
// decodes). It prints the round trip's p50 and p99 in µs. On a VM whose
// idle vCPUs halt, a round trip after an idle spell pays for waking both
// sides (docs/benchmarks.md, issue 20 target 3).
//
//	go run ./bench/pingpong [-n 5000] [-idle 200us]
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"slices"
	"time"
)

func main() {
	n := flag.Int("n", 5000, "round trips")
	idle := flag.Duration("idle", 200*time.Microsecond, "pause between round trips (0: back to back)")
	serve := flag.String("serve", "", "internal: run as the answering process on this address")
	flag.Parse()
	if *serve != "" {
		answer(*serve)
		return
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	peer := exec.Command(os.Args[0], "-serve", addr)
	peer.Stderr = os.Stderr
	if err := peer.Start(); err != nil {
		log.Fatal(err)
	}
	defer peer.Process.Kill()
	var c net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if c, err = net.Dial("tcp", addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			log.Fatal(err)
		}
	}
	defer c.Close()
	buf := make([]byte, 1)
	lat := make([]time.Duration, 0, *n)
	for range *n {
		t0 := time.Now()
		if _, err := c.Write(buf); err != nil {
			log.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			log.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		if *idle > 0 {
			time.Sleep(*idle)
		}
	}
	slices.Sort(lat)
	fmt.Printf("round trip, idle %v between: p50 %d µs, p99 %d µs (%d round trips)\n",
		*idle, lat[len(lat)/2].Microseconds(), lat[len(lat)*99/100].Microseconds(), len(lat))
}

// answer echoes each byte it reads on the first connection to addr.
func answer(addr string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	c, err := l.Accept()
	if err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 64)
	for {
		k, err := c.Read(buf)
		if err != nil {
			return
		}
		if _, err := c.Write(buf[:k]); err != nil {
			return
		}
	}
}
