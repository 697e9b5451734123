// cp's progress line, redrawn on a terminal.

package main

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"
)

// isTerminal reports whether w is a terminal: a progress line redrawn
// with "\r" belongs on a screen, not in a log file or a pipe.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// progressLine redraws "done / total, rate, ETA" on w every 200 ms until
// end. With w nil it only counts.
type progressLine struct {
	done  atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup
	label string
}

func startProgress(w io.Writer, label string, total int64) *progressLine {
	p := &progressLine{stop: make(chan struct{}), label: label}
	if w == nil {
		return p
	}
	start := time.Now()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				printProgress(w, label, p.done.Load(), total, start, true)
				return
			case <-t.C:
				printProgress(w, label, p.done.Load(), total, start, false)
			}
		}
	}()
	return p
}

func (p *progressLine) end() {
	close(p.stop)
	p.wg.Wait()
}

func printProgress(w io.Writer, label string, done, total int64, start time.Time, final bool) {
	el := time.Since(start).Seconds()
	rate := float64(done) / max(el, 1e-9)
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	eta := "--:--"
	if rate > 0 && total >= done {
		s := int(float64(total-done) / rate)
		eta = fmt.Sprintf("%02d:%02d", s/60, s%60)
	}
	end := "\r"
	if final {
		end = "\n"
	}
	fmt.Fprintf(w, "\r%s %s / %s  %5.1f%%  %s/s  ETA %s  %s", label, humanBytes(done), humanBytes(total), pct, humanBytes(int64(rate)), eta, end)
}
