package scenarios

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/results"
)

func TestDevRun(t *testing.T) {
	name := os.Getenv("DEVSC")
	if name == "" {
		t.Skip()
	}
	var sets []string
	if s := os.Getenv("DEVSET"); s != "" {
		sets = strings.Split(s, ",")
	}
	s, err := Load(name, sets)
	require.NoError(t, err)
	b, err := NewSimBackend(s)
	require.NoError(t, err)
	t0 := time.Now()
	f, err := Run(context.Background(), s, RunOptions{Backend: b, OnStep: func(d, n int, l string) { t.Log(time.Since(t0).Round(time.Millisecond), d, n, l) }})
	t.Log("wall", time.Since(t0))
	results.PrintSummary(os.Stdout, f)
	for _, sy := range f.Syncs {
		t.Logf("gen %d %s seq %d %s full=%v %.2fs svc=%d eps=%d writes=%d ops=%v", sy.Proxier, sy.Family, sy.Seq, sy.Trigger, sy.Full, sy.Seconds, sy.Services, sy.Endpoints, sy.Ops.Writes(), sy.Ops)
	}
	if f.Probes != nil {
		for _, fl := range f.Probes.Failures {
			t.Logf("failure %s %s at %s: %s", f.Probes.Targets[fl.Target].Service, f.Probes.Targets[fl.Target].Address, fl.Time.Sub(f.Start), fl.Outcome)
		}
	}
	require.NoError(t, err)
}
