package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// signalTrap catches SIGINT and SIGTERM from main's first instruction, before
// kpsim knows which command it runs, and holds a signal until it does:
//
//   - A command that handles interruption (kpsim run: it writes the partial
//     results file) claims the trap; a held or later signal cancels the
//     command's context.
//   - Any other command releases it: a held signal is raised again, and from
//     then on signals act as they did when kpsim started (terminate, or
//     nothing if the parent ignored them).
//
// kpsim run handles SIGINT even when it started with SIGINT ignored, as a
// background job of a non-interactive shell does (signal.Notify un-ignores
// it): a script's `kill -INT` then stops a run the same way whether it is
// still loading or already running, rather than being lost during loading
// and honoured afterwards.
type signalTrap struct {
	ch     chan os.Signal
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	claimed  bool
	released bool
	held     os.Signal
}

type trapKey struct{}

func trapSignals() *signalTrap {
	t := &signalTrap{ch: make(chan os.Signal, 2)}
	t.ctx, t.cancel = context.WithCancelCause(context.Background())
	t.ctx = context.WithValue(t.ctx, trapKey{}, t)
	signal.Notify(t.ch, os.Interrupt, syscall.SIGTERM)
	go t.loop()
	return t
}

func (t *signalTrap) context() context.Context { return t.ctx }

func (t *signalTrap) loop() {
	for s := range t.ch {
		t.mu.Lock()
		switch {
		case t.claimed:
			t.cancel(received(s))
		case t.held == nil:
			t.held = s
		}
		t.mu.Unlock()
	}
}

// claim makes signals interrupt the command (cancel its context).
func (t *signalTrap) claim() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.claimed = true
	if t.held != nil {
		t.cancel(received(t.held))
	}
}

// release stops catching signals: the next one acts as the default (or the
// inherited disposition), and a held one is raised again.
func (t *signalTrap) release() {
	signal.Stop(t.ch)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.released {
		return
	}
	t.released = true
	if !t.claimed && t.held != nil {
		if sig, ok := t.held.(syscall.Signal); ok {
			_ = syscall.Kill(os.Getpid(), sig)
		}
	}
}

// received is the cause of a context cancelled by signal s: "received SIGINT".
func received(s os.Signal) error {
	if sig, ok := s.(syscall.Signal); ok {
		return fmt.Errorf("received %s", unix.SignalName(sig))
	}
	return fmt.Errorf("received %v", s)
}

// trapOf returns the trap main installed, or nil (tests calling run).
func trapOf(ctx context.Context) *signalTrap {
	t, _ := ctx.Value(trapKey{}).(*signalTrap)
	return t
}

// claimSignals is for commands that handle interruption through their
// context; it returns the function that releases the trap when the command
// no longer wants signals (a second Ctrl-C then ends the process).
func claimSignals(cmd *cobra.Command) (release func()) {
	t := trapOf(cmd.Context())
	if t == nil {
		return func() {}
	}
	t.claim()
	return t.release
}

// releaseSignals is every other command's: signals act as by default.
func releaseSignals(cmd *cobra.Command) {
	if t := trapOf(cmd.Context()); t != nil {
		t.release()
	}
}

// interruptibleKey, in a command's annotations, marks a command that claims
// the signal trap in its RunE; every other command releases it before it runs.
const interruptibleKey = "kpsim-interruptible"
