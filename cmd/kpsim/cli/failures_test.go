package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/record"
)

// TestFailurePrinter: failed syncs are printed as they happen, the first
// few in full, then a count at most every failureCountEvery, and the rest
// at the end; successful syncs print nothing. 199 failures over 40 s give 10 lines.
func TestFailurePrinter(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(0, 0)
	p := newFailurePrinter(&out, nil, func() time.Time { return now })
	fail := func(seq int) record.Sync {
		return record.Sync{Family: "IPv4", Seq: seq, Trigger: "retry",
			Error: fmt.Sprintf("ipset add KUBE-CLUSTER-IP 10.96.0.%d,tcp:80: set is full (maxelem 65536)", seq)}
	}
	p.sync(record.Sync{Family: "IPv4", Seq: 1, Trigger: "initial"})
	require.Empty(t, out.String(), "a successful sync prints nothing")
	for seq := 2; seq <= 200; seq++ {
		p.sync(fail(seq))
		now = now.Add(200 * time.Millisecond) // 199 failures over 40 s
	}
	p.finish()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Equal(t, "kpsim run: IPv4 proxier 0 sync 2 (retry) failed: ipset add KUBE-CLUSTER-IP 10.96.0.2,tcp:80: set is full (maxelem 65536)", lines[0])
	require.Contains(t, lines[4], "sync 6 (retry) failed")
	require.Equal(t, "kpsim run: further failed syncs are counted, at most one line every 10s", lines[5])
	require.Len(t, lines, 5+1+3+1, "first five, the note, three counts, the last count")
	require.Equal(t, "kpsim run: 50 more failed syncs (55 in all); the latest: IPv4 proxier 0 sync 56 (retry) failed: ipset add KUBE-CLUSTER-IP 10.96.0.56,tcp:80: set is full (maxelem 65536)", lines[6])
	require.Contains(t, lines[9], "44 more failed syncs (199 in all)", "the last count comes with finish")
}
