package kernel

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

	"github.com/kpsim/kpsim/proxier/dataplane"
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
	if !Isolated() {
		return ErrNotIsolated
	}
	if mode == "crash" {
		// A run whose parent died too: its namespace outlives both.
		ns, err := newNamedNetns(fmt.Sprintf("%s%d-pods", NetnsPrefix, deadPID))
		if err != nil {
			return err
		}
		fmt.Println(childReady)
		return ns.handle.Close()
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

// deadPID is a process id no process has (above Linux's pid_max).
const deadPID = 1 << 30

// HostSnapshot is the state of the host's network namespace that a kernel
// run must leave as it found it.
func HostSnapshot(t *testing.T) map[string]string {
	t.Helper()
	cmds := [][]string{
		{"ip", "-d", "link"}, {"ip", "addr"}, {"ip", "route"}, {"ip", "-6", "route"},
		{"iptables-legacy-save"}, {"ip6tables-legacy-save"}, {"iptables-nft-save"}, {"ip6tables-nft-save"},
		{"ipset", "list"}, {"ls", "-a", "/run/netns"},
	}
	snap := map[string]string{}
	for _, c := range cmds {
		out, err := exec.Command(c[0], c[1:]...).CombinedOutput()
		s := string(out)
		if err != nil {
			s += "error: " + err.Error()
		}
		// iptables-save stamps its output with the time.
		var keep []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.HasPrefix(l, "#") {
				keep = append(keep, l)
			}
		}
		snap[strings.Join(c, " ")] = strings.Join(keep, "\n")
	}
	return snap
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	for _, tool := range []string{"ip", "ipset", "iptables-legacy-save", "iptables-nft-save"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s to take the host snapshot: %v", tool, err)
		}
	}
}

// TestHostUntouched runs kernel work in an isolated child, completed,
// interrupted with SIGINT and killed with SIGKILL, and checks that the host's
// links, addresses, routes, iptables (legacy and nft), ipsets and named
// namespaces are exactly as they were.
func TestHostUntouched(t *testing.T) {
	requireRoot(t)
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
			before := HostSnapshot(t)
			t.Setenv(childModeEnv, tc.mode)
			pr, pw := io.Pipe()
			var stderr bytes.Buffer
			type result struct {
				code int
				err  error
			}
			done := make(chan result, 1)
			go func() {
				code, err := RunIsolated(nil, nil, pw, &stderr)
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
			require.Equal(t, before, HostSnapshot(t))
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

func TestKernelWorkRefusedOutsideIsolation(t *testing.T) {
	require.False(t, Isolated())
	_, err := NewTopology(TopologyConfig{})
	require.ErrorIs(t, err, ErrNotIsolated)
	_, err = NewNetns("client")
	require.ErrorIs(t, err, ErrNotIsolated)
	// A marker naming this namespace (a copied environment) does not count.
	own, err := netnsInode()
	require.NoError(t, err)
	t.Setenv(isolatedEnv, fmt.Sprint(own))
	require.False(t, Isolated())
}

func TestParseNetnsName(t *testing.T) {
	tests := []struct {
		name string
		pid  int
		ok   bool
	}{
		{"kpsim-1234-client", 1234, true},
		{"kpsim-1234-pods", 1234, true},
		{"kpsim-1234-", 0, false},
		{"kpsim-x-client", 0, false},
		{"kpsim-0-client", 0, false},
		{"cni-1234-client", 0, false},
		{"kpsim-1234", 0, false},
	}
	for _, tc := range tests {
		pid, ok := parseNetnsName(tc.name)
		require.Equal(t, tc.ok, ok, tc.name)
		require.Equal(t, tc.pid, pid, tc.name)
	}
}

// TestCleanRemovesStaleNamespaces leaves a namespace named for a dead run
// behind (as a run whose parent was killed would) and checks that Clean
// removes it, keeps nothing else, and leaves /run as it found it.
func TestCleanRemovesStaleNamespaces(t *testing.T) {
	requireRoot(t)
	before := HostSnapshot(t)
	t.Setenv(childModeEnv, "crash")
	var stdout, stderr bytes.Buffer
	code, err := RunIsolated(nil, nil, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	require.Zero(t, code, stderr.String())
	require.Contains(t, stdout.String(), childReady)
	stale, err := ListRunNetns(deadPID)
	require.NoError(t, err)
	require.Len(t, stale, 1)

	rep, err := Clean(false)
	require.NoError(t, err)
	require.Contains(t, rep.Removed, stale[0].Name)
	require.Empty(t, rep.Killed)
	stale, err = ListRunNetns(deadPID)
	require.NoError(t, err)
	require.Empty(t, stale)
	if !strings.Contains(before["ls -a /run/netns"], "No such file") {
		return
	}
	// Clean does not know who made /run/netns: this test made it, and removes it.
	removeNetnsDirIfEmpty()
	require.Equal(t, before, HostSnapshot(t))
}
