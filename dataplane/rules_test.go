package dataplane_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kpsim/kpsim/dataplane"
)

func TestSplitFormatRule(t *testing.T) {
	for _, tc := range []struct {
		line  string
		words []string
		err   string
	}{
		{line: "-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT",
			words: []string{"-A", "KUBE-SERVICES", "-m", "set", "--match-set", "KUBE-CLUSTER-IP", "dst,dst", "-j", "ACCEPT"}},
		{line: `-A X -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -j RETURN`,
			words: []string{"-A", "X", "-m", "comment", "--comment", "Kubernetes service cluster ip + port for masquerade purpose", "-j", "RETURN"}},
		{line: "  -A\tX  ", words: []string{"-A", "X"}},
		{line: `-A X --comment "a \"quoted\" \\ word"`, words: []string{"-A", "X", "--comment", `a "quoted" \ word`}},
		{line: `-A X --comment ""`, words: []string{"-A", "X", "--comment", ""}},
		{line: `-A X --comment "open`, err: "unterminated quote"},
	} {
		t.Run(tc.line, func(t *testing.T) {
			words, err := dataplane.SplitRule(tc.line)
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.words, words)
			back, err := dataplane.SplitRule(dataplane.FormatRule(words))
			require.NoError(t, err)
			require.Equal(t, words, back, "FormatRule must survive SplitRule")
		})
	}
	require.Equal(t, "sctp", dataplane.SCTP.SetProto())
	require.Equal(t, "udp", dataplane.UDP.SetProto())
	require.Equal(t, "tcp", dataplane.TCP.SetProto())
}
