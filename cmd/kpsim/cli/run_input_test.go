package cli

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/results"
)

// TestRunRefusesOutputUpFront: an output that cannot be written is refused
// before the scenario runs (the run's first line never appears), naming the
// path given rather than a temporary file.
func TestRunRefusesOutputUpFront(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing", "deeper")
	for _, tc := range []struct {
		name, flag, path, want string
	}{
		{"proc", "-o", "/proc/x.json", "--output /proc/x.json: cannot create files in /proc"},
		{"directory", "-o", dir, "--output " + dir + ": is a directory"},
		{"missing parent outside the working directory", "-o", filepath.Join(missing, "x.json"),
			"directory " + missing + " does not exist (kpsim creates missing directories only under the working directory)"},
		{"state dump into a directory", "--state", dir, "--state " + dir + ": is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := []string{"run", "-s", "smoke", "--set", "cluster.services=4", "--set", "probes.services=1", tc.flag, tc.path}
			if tc.flag != "-o" {
				args = append(args, "-o", filepath.Join(dir, "r.json"))
			}
			require.Equal(t, 2, run(args, &stdout, &stderr))
			require.Contains(t, stderr.String(), tc.want)
			require.NotContains(t, stderr.String(), "13 steps", "refused before the run")
			require.NotContains(t, stderr.String(), ".x.json.", "no temporary file named")
		})
	}
	_, err := os.Stat(filepath.Join(dir, "missing"))
	require.True(t, os.IsNotExist(err), "no directory created outside the working directory")
}

// TestRunCreatesDirectoriesUnderWorkingDir: a missing directory under the
// working directory is created, as out/ is by default.
func TestRunCreatesDirectoriesUnderWorkingDir(t *testing.T) {
	t.Chdir(t.TempDir())
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"run", "-s", "smoke", "--set", "cluster.services=4", "--set", "probes.services=1",
		"-o", "runs/today/a.json"}, &stdout, &stderr), stderr.String())
	_, err := results.Read("runs/today/a.json")
	require.NoError(t, err)
}

// TestOtherOutputsRefusedUpFront: every command that writes a file checks
// it the same way before reading its input.
func TestOtherOutputsRefusedUpFront(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"state", "-f", exampleDir, "-o", dir},
		{"anonymize", exampleDir, "-o", dir},
		{"calibrate", "-o", dir},
	} {
		t.Run(args[0], func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, 2, run(args, &stdout, &stderr))
			require.Contains(t, stderr.String(), "--output "+dir+": is a directory")
		})
	}
}

// startKpsim starts this test binary as kpsim (see TestMain), optionally
// with SIGINT ignored as a background job of a non-interactive shell starts,
// and returns it once its stderr has printed a line containing ready.
func startKpsim(t *testing.T, ignoreSIGINT bool, ready string, args ...string) (*exec.Cmd, *strings.Builder, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	if ignoreSIGINT {
		cmd = exec.Command("sh", append([]string{"-c", `trap "" INT; exec "$0" "$@"`, os.Args[0]}, args...)...)
	}
	cmd.Env = append(os.Environ(), "KPSIM_TEST_MAIN=1")
	pipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var log strings.Builder
	seen := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pipe)
		once := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if !once && strings.Contains(sc.Text(), ready) {
				once = true
				close(seen)
			}
		}
	}()
	select {
	case <-seen:
	case <-done:
		t.Fatalf("kpsim ended before %q:\n%s", ready, log.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("no %q after two minutes:\n%s", ready, log.String())
	}
	return cmd, &log, done
}

func exitCode(t *testing.T, cmd *exec.Cmd, done <-chan struct{}) int {
	t.Helper()
	<-done
	err := cmd.Wait()
	if err == nil {
		return 0
	}
	ee, ok := err.(*exec.ExitError)
	require.True(t, ok, "wait: %v", err)
	return ee.ExitCode()
}

// TestInterruptWhileLoading sends SIGINT while a large scenario still loads:
// kpsim ends promptly with status 3 and says so, writing nothing, whether
// started from a terminal or in the background of a script (SIGINT ignored).
// Before, the first was killed by the signal and the second ran to the end.
func TestInterruptWhileLoading(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 50,000-service cluster: skipped with -short")
	}
	for _, ignored := range []bool{false, true} {
		t.Run(map[bool]string{false: "terminal", true: "background of a script"}[ignored], func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "r.json")
			cmd, log, done := startKpsim(t, ignored, "kpsim run: loading",
				"run", "-s", "scale-10k", "--set", "cluster.services=50000", "-o", out)
			require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
			require.Equal(t, 3, exitCode(t, cmd, done), log.String())
			require.Contains(t, log.String(), "interrupted while loading scenario scale-10k (received SIGINT)")
			require.Contains(t, log.String(), "no results file written")
			_, err := os.Stat(out)
			require.True(t, os.IsNotExist(err))
		})
	}
}

// TestInterruptDuringRun: SIGTERM once the run has started stops it and the
// partial results file is still written, marked interrupted.
func TestInterruptDuringRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the simulator in real time: skipped with -short")
	}
	out := filepath.Join(t.TempDir(), "r.json")
	cmd, log, done := startKpsim(t, false, "(13 steps)", "run", "-s", "smoke", "-o", out,
		"--set", "cluster.services=4", "--set", "probes.services=1", "--set", "sim.timeScale=1", "--set", "timeline[11].sleep=10m")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 3, exitCode(t, cmd, done), log.String())
	f, err := results.Read(out)
	require.NoError(t, err, log.String())
	require.True(t, f.Interrupted)
	require.Equal(t, "interrupted: received SIGTERM", f.Error)
}

// TestStateRefusesWhatWouldBeEmpty: a node the export does not have, or an
// export with no Service, is refused naming what exists; an orphan slice is
// said out loud. Before, each gave status 0 and an empty or unexplained dump.
func TestStateRefusesWhatWouldBeEmpty(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.json")
	require.NoError(t, os.WriteFile(empty, []byte(`{"apiVersion":"v1","kind":"List","items":[]}`), 0o644))
	orphan := filepath.Join(dir, "orphan.yaml")
	require.NoError(t, os.WriteFile(orphan, []byte(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: gone-abcde, namespace: default, labels: {kubernetes.io/service-name: gone}}
addressType: IPv4
endpoints: [{addresses: [10.244.1.5]}]
ports: [{name: http, port: 8080, protocol: TCP}]
`), 0o644))
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"ghost node", []string{"state", "-f", exampleDir, "--node", "ghost"}, 2,
			`--node "ghost": no such node in ` + exampleDir + "; it has node-a, node-b, node-c"},
		{"empty export", []string{"state", "-f", empty}, 2, empty + " holds no Service kube-proxy would program"},
		{"only an orphan slice", []string{"state", "-f", orphan}, 2, "holds no Service"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, tc.code, run(tc.args, &stdout, &stderr), stderr.String())
			require.Contains(t, stderr.String(), tc.stderr)
		})
	}
	// An orphan next to real services: the dump is made, with a warning.
	both := filepath.Join(dir, "both")
	require.NoError(t, os.Mkdir(both, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(both, "orphan.yaml"), mustRead(t, orphan), 0o644))
	entries, err := os.ReadDir(exampleDir)
	require.NoError(t, err)
	for _, e := range entries {
		require.NoError(t, os.WriteFile(filepath.Join(both, e.Name()), mustRead(t, filepath.Join(exampleDir, e.Name())), 0o644))
	}
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"state", "-f", both}, &stdout, &stderr), stderr.String())
	require.Contains(t, stderr.String(), "warning: 1 EndpointSlice belongs to no Service in "+both+", so kube-proxy programs nothing for it: default/gone-abcde")
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}

// TestIsolatedChildSaysItOnce: a kernel run re-executes its command line in
// a namespace of its own; the child loads the scenario again but leaves
// the loading line and the warnings to its parent.
func TestIsolatedChildSaysItOnce(t *testing.T) {
	load := func() string {
		var stderr bytes.Buffer
		_, err := loadInterruptible(t.Context(), "smoke", []string{"proxier.ipset=exec"}, &stderr)
		require.NoError(t, err)
		return stderr.String()
	}
	parent := load()
	require.Contains(t, parent, "kpsim run: loading smoke")
	require.Contains(t, parent, "warning: ")
	// What RunIsolated hands its child: another namespace's inode.
	t.Setenv("KPSIM_ISOLATED_FROM_NETNS", "1")
	require.Empty(t, load())
}
