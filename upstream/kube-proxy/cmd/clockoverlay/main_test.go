package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRewrite: a package's time.Now and time.Since read releaseclock, or
// what calls maps them to; other uses of package time stay, and a file
// left with none no longer imports it.
func TestRewrite(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(src), 0o644))
		return p
	}
	proxier := write("proxier.go", `package nftables

import (
	"fmt"
	"time"
)

func sync(last time.Time) bool {
	start := time.Now()
	fmt.Println(time.Since(start))
	return time.Since(last) > time.Hour
}
`)
	got, n, err := rewrite(proxier, rewrites["pkg/proxy/nftables"])
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Contains(t, string(got), "start := releaseclock.Now()")
	require.Contains(t, string(got), "return releaseclock.Since(last) > time.Hour")
	require.Contains(t, string(got), `import "github.com/kpsim/kpsim/upstream/kube-proxy/releaseclock"`)
	require.Contains(t, string(got), `"time"`, "time.Hour still needs it")

	metrics := write("metrics.go", `package metrics

import "time"

func SinceInSeconds(start time.Time) float64 { return time.Since(start).Seconds() }
`)
	got, n, err = rewrite(metrics, rewrites["pkg/proxy/metrics"])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Contains(t, string(got), "releaseclock.Measured(start).Seconds()", "what the release measures stays wall time")

	only := write("tracker.go", `package proxy

import "time"

var started = time.Now()
`)
	got, n, err = rewrite(only, rewrites["pkg/proxy"])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NotContains(t, string(got), `"time"`, "an import left unused would not compile")
	require.Contains(t, string(got), "var started = releaseclock.Now()")

	// A loop's wait.NeverStop stops with its generation; wait's import
	// goes when nothing else uses it, and stays when something does.
	loop := write("loop.go", `package nftables

import (
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/kubernetes/pkg/proxy/runner"
)

func (p *Proxier) SyncLoop() {
	p.syncRunner.Loop(wait.NeverStop)
}
`)
	got, n, err = rewrite(loop, rewrites["pkg/proxy/nftables"])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Contains(t, string(got), "p.syncRunner.Loop(releaseclock.Stop())")
	require.NotContains(t, string(got), "pkg/util/wait")
	require.Contains(t, string(got), `"github.com/kpsim/kpsim/upstream/kube-proxy/releaseclock"`)
	both := write("graceful.go", `package ipvs

import (
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func (m *Manager) Run(start time.Time) {
	go wait.Until(m.tryDeleteRs, time.Minute, wait.NeverStop)
	_ = time.Since(start)
}
`)
	got, n, err = rewrite(both, rewrites["pkg/proxy/ipvs"])
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Contains(t, string(got), "go wait.Until(m.tryDeleteRs, time.Minute, releaseclock.Stop())")
	require.Contains(t, string(got), "_ = releaseclock.Since(start)")
	require.Contains(t, string(got), `"k8s.io/apimachinery/pkg/util/wait"`, "wait.Until still needs it")
	require.Contains(t, string(got), `"time"`, "time.Minute still needs it")

	// iptables mode's canary monitor keeps NeverStop: its stop deletes
	// the chains the next generation's monitor made.
	monitor := write("monitor.go", `package iptables

import "k8s.io/apimachinery/pkg/util/wait"

func start(ipt Interface, p *Proxier) {
	go ipt.Monitor(canary, tables, p.forceSync, p.syncPeriod, wait.NeverStop)
}
`)
	_, n, err = rewrite(monitor, rewrites["pkg/proxy/iptables"])
	require.NoError(t, err)
	require.Zero(t, n)

	// A local variable named time is not the package.
	shadow := write("shadow.go", `package proxy

import "time"

func f(d time.Duration) { time := d; _ = time }
`)
	_, n, err = rewrite(shadow, rewrites["pkg/proxy"])
	require.NoError(t, err)
	require.Zero(t, n)
}
