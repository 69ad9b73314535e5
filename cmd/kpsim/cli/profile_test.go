package cli

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
)

// pprofSummary is what a profile.proto (github.com/google/pprof's format)
// says of itself: its sample types ("inuse_space", ...) and how many samples
// it holds. Decoded with protowire, so that checking a profile adds no
// dependency.
type pprofSummary struct {
	sampleTypes []string
	samples     int
}

func readPprof(t *testing.T, path string) pprofSummary {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	require.NoError(t, err, "%s: a pprof profile is gzipped", path)
	b, err := io.ReadAll(zr)
	require.NoError(t, err)
	var strs []string
	var typeIdx []int64 // string table indexes of the sample types' names
	var s pprofSummary
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		require.GreaterOrEqual(t, n, 0, "%s: bad field tag", path)
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		require.GreaterOrEqual(t, n, 0, "%s: bad field %d", path, num)
		v := b[:n]
		b = b[n:]
		switch num {
		case 1: // sample_type: ValueType{type: 1 (string index), unit: 2}
			msg, m := protowire.ConsumeBytes(v)
			require.GreaterOrEqual(t, m, 0)
			for len(msg) > 0 {
				fn, ft, k := protowire.ConsumeTag(msg)
				require.GreaterOrEqual(t, k, 0)
				msg = msg[k:]
				if fn == 1 && ft == protowire.VarintType {
					x, k := protowire.ConsumeVarint(msg)
					require.GreaterOrEqual(t, k, 0)
					typeIdx = append(typeIdx, int64(x))
					msg = msg[k:]
					continue
				}
				k = protowire.ConsumeFieldValue(fn, ft, msg)
				require.GreaterOrEqual(t, k, 0)
				msg = msg[k:]
			}
		case 2: // sample
			s.samples++
		case 6: // string_table
			str, m := protowire.ConsumeString(v)
			require.GreaterOrEqual(t, m, 0)
			strs = append(strs, str)
		}
	}
	for _, i := range typeIdx {
		require.Less(t, int(i), len(strs), "%s: sample type names string %d of %d", path, i, len(strs))
		s.sampleTypes = append(s.sampleTypes, strs[i])
	}
	return s
}

// TestRunWritesProfiles: --cpuprofile and --memprofile write profiles that
// pprof reads, the heap profile with its in-use figures.
func TestRunWritesProfiles(t *testing.T) {
	// Sample every half kilobyte, not every 512 KiB: what the run holds at
	// 200 services is a few MB, and the check below must not be chance.
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 512
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "mem.pprof")
	var stdout, stderr bytes.Buffer
	code := run([]string{"run", "-s", "smoke", "-o", filepath.Join(dir, "r.json"), "--set", "cluster.services=200",
		"--cpuprofile", cpu, "--memprofile", mem}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())

	c := readPprof(t, cpu)
	require.Equal(t, []string{"samples", "cpu"}, c.sampleTypes)
	m := readPprof(t, mem)
	require.Equal(t, []string{"alloc_objects", "alloc_space", "inuse_objects", "inuse_space"}, m.sampleTypes)
	require.Positive(t, m.samples, "a run of 200 services allocates more than the heap profile's sampling rate")

	if testing.Short() {
		return
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to read the profiles with go tool pprof")
	}
	for _, p := range []string{cpu, mem} {
		out, err := exec.Command(goTool, "tool", "pprof", "-top", p).CombinedOutput()
		require.NoError(t, err, "go tool pprof -top %s: %s", p, out)
		require.Contains(t, string(out), "flat%", "go tool pprof -top %s", p)
	}
	out, err := exec.Command(goTool, "tool", "pprof", "-sample_index=inuse_space", "-top", mem).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "scenarios.(*apiStore)", "the heap is profiled while the run's API objects are live")
}

// TestRunProfileFlagsRefused: one profile per file, so not with --seeds.
func TestRunProfileFlagsRefused(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, 2, run([]string{"run", "-s", "smoke", "--seeds", "2", "--memprofile", filepath.Join(t.TempDir(), "m")}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "--cpuprofile and --memprofile take one run")
}
