package cli

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/kpsim/kpsim/record"
)

// Failed syncs are printed as they happen: the first shownFailures in full,
// then, so that a run whose every sync fails does not flood the terminal, a
// count at most every failureCountEvery, and a last count at the end.
const (
	shownFailures     = 5
	failureCountEvery = 10 * time.Second
	maxErrorLen       = 300
)

// failurePrinter prints failed syncs on stderr, above the progress bar when
// there is one.
type failurePrinter struct {
	w   io.Writer
	bar *progress // nil without a terminal
	now func() time.Time

	mu        sync.Mutex
	failed    int    // failed syncs so far
	unshown   int    // failed syncs since the last line about them
	latest    string // the latest unshown failure
	lastCount time.Time
}

func newFailurePrinter(w io.Writer, bar *progress, now func() time.Time) *failurePrinter {
	return &failurePrinter{w: w, bar: bar, now: now}
}

func (p *failurePrinter) sync(s record.Sync) {
	if !s.Failed() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failed++
	line := fmt.Sprintf("%s proxier %d sync %d (%s) failed: %s", s.Family, s.Proxier, s.Seq, s.Trigger, clip(s.Error, maxErrorLen))
	switch {
	case p.failed <= shownFailures:
		p.printf("kpsim run: %s", line)
		if p.failed == shownFailures {
			p.printf("kpsim run: further failed syncs are counted, at most one line every %s", failureCountEvery)
			p.lastCount = p.now()
		}
	default:
		p.unshown++
		p.latest = line
		if p.now().Sub(p.lastCount) >= failureCountEvery {
			p.count()
		}
	}
}

// finish prints the failures not yet counted.
func (p *failurePrinter) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.unshown > 0 {
		p.count()
	}
}

func (p *failurePrinter) count() {
	p.printf("kpsim run: %d more failed syncs (%d in all); the latest: %s", p.unshown, p.failed, p.latest)
	p.unshown = 0
	p.lastCount = p.now()
}

func (p *failurePrinter) printf(format string, a ...any) {
	if p.bar != nil {
		p.bar.printLine(fmt.Sprintf(format, a...))
		return
	}
	fmt.Fprintf(p.w, format+"\n", a...)
}

// clip shortens s to at most n bytes, saying so.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
