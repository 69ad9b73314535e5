package testbed

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/internal/hosttools"
	"github.com/kpsim/kpsim/kernel/netns"
	"github.com/kpsim/kpsim/kernel/netns/netnstest"
)

// The isolation tests re-execute this test binary through RunIsolated; the
// child finds childModeEnv and runs childMain instead of the tests.
const childModeEnv = "KPSIM_KERNEL_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childModeEnv); mode != "" {
		os.Exit(childMain(mode))
	}
	os.Exit(m.Run())
}

// childReady is printed by a child once its topology, servers, ipsets and
// rules exist, so the parent can interrupt it mid-run.
const childReady = "CHILD-READY"

// childMain is a kernel run cut down to what this host's kernel can do
// (no IPVS, no dummy links): the topology, servers on pod addresses, real
// TCP and UDP traffic from the client through the node, ipsets and
// iptables rules in the node namespace.
func childMain(mode string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := childRun(ctx, mode); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		if ctx.Err() != nil {
			return 130
		}
		return 1
	}
	return 0
}

func childRun(ctx context.Context, mode string) (err error) {
	if !netns.Isolated() {
		return netns.ErrNotIsolated
	}
	topo, err := NewTopology(TopologyConfig{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, topo.Close()) }()
	ep := netip.MustParseAddrPort("10.244.1.5:8080")
	if err := topo.AddPodAddress(ep.Addr()); err != nil {
		return err
	}
	servers := NewServers(topo.Pods)
	defer servers.Close()
	for _, proto := range []dataplane.Protocol{dataplane.TCP, dataplane.UDP} {
		if err := servers.Start(ep, proto); err != nil {
			return err
		}
	}
	// Rules and sets the way the proxier writes them, in the node namespace.
	for _, args := range [][]string{
		{"ipset", "create", "KUBE-CLUSTER-IP", "hash:ip,port"},
		{"ipset", "add", "KUBE-CLUSTER-IP", "10.96.0.10,tcp:80"},
		{"ipset", "create", "KUBE-NODE-PORT-TCP", "bitmap:port", "range", "0-65535"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	rules := "*nat\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\n" +
		"-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\nCOMMIT\n"
	for _, restore := range []string{"iptables-legacy-restore", "iptables-nft-restore"} {
		cmd := exec.Command(restore, "--noflush")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", restore, err, out)
		}
	}
	prober := NewProber(topo.Client, 2*time.Second)
	defer prober.Close()
	for _, c := range []struct {
		target netip.AddrPort
		proto  dataplane.Protocol
		want   string
	}{
		{ep, dataplane.TCP, OutcomeOK},
		{ep, dataplane.UDP, OutcomeOK},
		{netip.MustParseAddrPort("10.244.1.5:9"), dataplane.TCP, OutcomeRefused},
	} {
		a, err := prober.Probe(ctx, c.target, c.proto)
		if err != nil {
			return err
		}
		if a.Outcome != c.want {
			return fmt.Errorf("probe %s/%s: %s, want %s", c.target, c.proto, a.Outcome, c.want)
		}
		if c.want == OutcomeOK && a.Served != ep {
			return fmt.Errorf("probe %s/%s answered by %s", c.target, c.proto, a.Served)
		}
	}
	// An endpoint that goes away takes its address and route with it, and
	// can come back.
	servers.Stop(ep, dataplane.TCP)
	if err := topo.RemovePodAddress(ep.Addr()); err != nil {
		return err
	}
	if a, err := prober.Probe(ctx, ep, dataplane.TCP); err != nil || a.Outcome == OutcomeOK {
		return fmt.Errorf("probe of a removed endpoint: %+v, %v", a, err)
	}
	if err := topo.AddPodAddress(ep.Addr()); err != nil {
		return err
	}
	if err := servers.Start(ep, dataplane.TCP); err != nil {
		return err
	}
	if a, err := prober.Probe(ctx, ep, dataplane.TCP); err != nil || a.Outcome != OutcomeOK {
		return fmt.Errorf("probe of a restored endpoint: %+v, %v", a, err)
	}
	fmt.Println(childReady)
	if mode != "wait" {
		return nil
	}
	// Keep traffic flowing, bounded, until interrupted.
	for i := 0; i < 300; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if _, err := prober.Probe(ctx, ep, dataplane.TCP); err != nil {
			return err
		}
	}
	return errors.New("not interrupted within 30 s")
}

// TestHostUntouched runs kernel work in an isolated child, completed,
// interrupted with SIGINT and killed with SIGKILL, and checks that the host's
// links, addresses, routes, iptables (legacy and nft), ipsets and named
// namespaces are exactly as they were.
func TestHostUntouched(t *testing.T) {
	netnstest.RequireHostTools(t)
	hosttools.Require(t, "iptables-legacy-restore", "iptables-nft-restore") // childRun's rules (ipset is a snapshot tool)
	tests := []struct {
		name     string
		mode     string
		signal   syscall.Signal
		wantCode int
	}{
		{"completed", "once", 0, 0},
		{"interrupted with SIGINT", "wait", syscall.SIGINT, 130},
		{"killed", "wait", syscall.SIGKILL, 128 + int(syscall.SIGKILL)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := netnstest.HostSnapshot(t)
			t.Setenv(childModeEnv, tc.mode)
			pr, pw := io.Pipe()
			var stderr bytes.Buffer
			type result struct {
				code int
				err  error
			}
			done := make(chan result, 1)
			go func() {
				code, err := netns.RunIsolated(nil, nil, pw, &stderr)
				pw.Close()
				done <- result{code, err}
			}()
			sc := bufio.NewScanner(pr)
			ready := false
			for sc.Scan() {
				if sc.Text() != childReady {
					continue
				}
				ready = true
				if tc.signal == 0 {
					continue
				}
				if tc.signal == syscall.SIGKILL {
					// The parent cannot forward SIGKILL: kill the child itself,
					// as the OOM killer would, and leave cleanup to the parent.
					kids := childPIDs(t)
					require.NotEmpty(t, kids)
					for _, k := range kids {
						require.NoError(t, syscall.Kill(k, syscall.SIGKILL))
					}
				} else {
					require.NoError(t, syscall.Kill(os.Getpid(), tc.signal))
				}
			}
			r := <-done
			require.NoError(t, r.err, stderr.String())
			require.True(t, ready, "child never got ready: %s", stderr.String())
			require.Equal(t, tc.wantCode, r.code, stderr.String())
			require.Equal(t, before, netnstest.HostSnapshot(t))
		})
	}
}

// childPIDs lists this process's children (the isolated child hangs off
// whichever thread started it).
func childPIDs(t *testing.T) []int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	require.NoError(t, err)
	var pids []int
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			var p int
			_, err := fmt.Sscan(f, &p)
			require.NoError(t, err)
			pids = append(pids, p)
		}
	}
	return pids
}

func TestTopologyRefusedOutsideIsolation(t *testing.T) {
	require.False(t, netns.Isolated())
	_, err := NewTopology(TopologyConfig{})
	require.ErrorIs(t, err, netns.ErrNotIsolated)
}
