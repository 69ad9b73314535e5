package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// stream is `go test -json` output, one event per line, in the shapes go
// test writes them.
func stream(t *testing.T, events ...event) string {
	var b strings.Builder
	for _, ev := range events {
		line, err := json.Marshal(ev)
		require.NoError(t, err)
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func out(pkg, test, text string) event {
	return event{Action: "output", Package: pkg, Test: test, Output: text + "\n"}
}

func TestSummary(t *testing.T) {
	const a, b = "example.com/a", "example.com/b"
	in := stream(t,
		// a: a skip of its own, and a child's (netnstest.Private) -v output
		// streamed by the parent test, whose subtest skips no event reports.
		out(a, "TestTool", "=== RUN   TestTool"),
		out(a, "TestTool", "    tool_test.go:12: needs ipset: not on PATH"),
		out(a, "TestTool", "--- SKIP: TestTool (0.00s)"),
		event{Action: "skip", Package: a, Test: "TestTool"},
		out(a, "TestChild", "=== RUN   TestChild"),
		out(a, "TestChild", "=== RUN   TestChild"),
		out(a, "TestChild", "=== RUN   TestChild/ipvs"),
		out(a, "TestChild", "    conformance.go:87: needs ipvs: no"),
		out(a, "TestChild", "=== RUN   TestChild/ipset"),
		out(a, "TestChild", "    conformance.go:92: needs ipset: not on PATH"),
		out(a, "TestChild", "--- PASS: TestChild (0.00s)"),
		out(a, "TestChild", "    --- SKIP: TestChild/ipvs (0.00s)"),
		out(a, "TestChild", "    --- SKIP: TestChild/ipset (0.00s)"),
		out(a, "TestChild", "PASS"),
		out(a, "TestChild", "--- PASS: TestChild (0.01s)"),
		event{Action: "pass", Package: a, Test: "TestChild"},
		out(a, "", "PASS"),
		out(a, "", "ok  \texample.com/a\t0.1s"),
		event{Action: "pass", Package: a},
		// b: a test that fails, one that passes, and a skip with no reason.
		out(b, "TestFine", "=== RUN   TestFine"),
		out(b, "TestFine", "    fine_test.go:3: chatter of a passing test"),
		out(b, "TestFine", "--- PASS: TestFine (0.00s)"),
		event{Action: "pass", Package: b, Test: "TestFine"},
		out(b, "TestBroken", "=== RUN   TestBroken"),
		out(b, "TestBroken/sub", "=== RUN   TestBroken/sub"),
		out(b, "TestBroken/sub", "    broken_test.go:9: want 1, got 2"),
		out(b, "TestBroken/sub", "    --- FAIL: TestBroken/sub (0.00s)"),
		event{Action: "fail", Package: b, Test: "TestBroken/sub"},
		out(b, "TestBroken", "--- FAIL: TestBroken (0.00s)"),
		event{Action: "fail", Package: b, Test: "TestBroken"},
		out(b, "TestQuiet", "=== RUN   TestQuiet"),
		out(b, "TestQuiet", "--- SKIP: TestQuiet (0.00s)"),
		event{Action: "skip", Package: b, Test: "TestQuiet"},
		out(b, "", "FAIL"),
		out(b, "", "FAIL\texample.com/b\t0.2s"),
		event{Action: "fail", Package: b},
	)
	var w strings.Builder
	s := newSummary(&w)
	require.NoError(t, s.read(strings.NewReader("go: downloading example.com/c v1.0.0\n"+in)))
	s.finish()
	require.True(t, s.failed)
	require.Equal(t, `go: downloading example.com/c v1.0.0
ok  	example.com/a	0.1s
    broken_test.go:9: want 1, got 2
    --- FAIL: TestBroken/sub (0.00s)
--- FAIL: TestBroken (0.00s)
FAIL
FAIL	example.com/b	0.2s

Skipped: 4 tests, by reason (KPSIM_REQUIRE_HOST_TOOLS=1 fails the ones a host tool is missing for):
(no reason given)
    example.com/b TestQuiet
needs ipset: not on PATH
    example.com/a TestTool
    example.com/a TestChild/ipset
needs ipvs: no
    example.com/a TestChild/ipvs

go test:
ok  	example.com/a	0.1s
FAIL	example.com/b	0.2s
`, w.String())
}

// TestSummaryUnfinished: a test that never ended (a panic) is printed when
// its package fails.
func TestSummaryUnfinished(t *testing.T) {
	const p = "example.com/p"
	var w strings.Builder
	s := newSummary(&w)
	require.NoError(t, s.read(strings.NewReader(stream(t,
		out(p, "TestPanics", "=== RUN   TestPanics"),
		out(p, "TestPanics", "panic: boom"),
		out(p, "", "FAIL\texample.com/p\t0.1s"),
		event{Action: "fail", Package: p},
	))))
	s.finish()
	require.True(t, s.failed)
	require.Equal(t, "FAIL\texample.com/p\t0.1s\npanic: boom\n\ngo test:\nFAIL\texample.com/p\t0.1s\n", w.String())
}
