package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTags: each era's tag holds for every release before it, and a
// release of the newest era needs none.
func TestTags(t *testing.T) {
	for name, want := range map[string][]string{
		"v1.30.3":  {"kpsim_k8s_before_1_37", "kpsim_k8s_before_1_34", "kpsim_k8s_before_1_33", "kpsim_k8s_before_1_32", "kpsim_k8s_before_1_31"},
		"v1.31.14": {"kpsim_k8s_before_1_37", "kpsim_k8s_before_1_34", "kpsim_k8s_before_1_33", "kpsim_k8s_before_1_32"},
		"v1.32.13": {"kpsim_k8s_before_1_37", "kpsim_k8s_before_1_34", "kpsim_k8s_before_1_33"},
		"v1.33.6":  {"kpsim_k8s_before_1_37", "kpsim_k8s_before_1_34"},
		"v1.34.3":  {"kpsim_k8s_before_1_37"},
		"v1.36":    {"kpsim_k8s_before_1_37"},
		"v1.37.2":  nil,
		"v1.38.0":  nil,
	} {
		r, err := parseRelease(name)
		require.NoError(t, err, name)
		require.Equal(t, want, r.tags(), name)
	}
	for _, bad := range []string{"1.36.1", "v1.36.1-rc.0", "v2.0.0", "v1.29.9"} {
		_, err := parseRelease(bad)
		require.Error(t, err, bad)
	}
}

// TestWaitsForHandlers: kubernetes PR #126532 is in 1.31 and reached 1.30
// in v1.30.5.
func TestWaitsForHandlers(t *testing.T) {
	for name, want := range map[string]bool{"v1.30.3": false, "v1.30.4": false, "v1.30.5": true, "v1.30.14": true, "v1.31.0": true, "v1.37.1": true} {
		r, err := parseRelease(name)
		require.NoError(t, err)
		require.Equal(t, want, r.waitsForHandlers(), name)
	}
}

// releaseGoMod is the part of a kubernetes release's go.mod that matters
// here, as `go mod edit -json` prints it: staging modules replaced into
// the tree, and a replacement of its own build that must not carry over.
const releaseGoMod = `{"Require": [
	{"Path": "k8s.io/kube-openapi", "Version": "v0.0.0-20240228011516-70dd3763d340"},
	{"Path": "k8s.io/utils", "Version": "v0.0.0-20230726121419-3b25d923346b"}
], "Replace": [
	{"Old": {"Path": "k8s.io/api"}, "New": {"Path": "./staging/src/k8s.io/api"}},
	{"Old": {"Path": "k8s.io/client-go"}, "New": {"Path": "./staging/src/k8s.io/client-go"}},
	{"Old": {"Path": "github.com/example/other"}, "New": {"Path": "github.com/example/other", "Version": "v1.2.3"}}
]}`

// TestGoModText: the staging modules at the release's staging version,
// or in a checkout's staging tree with k8s.io/kubernetes replaced by it.
func TestGoModText(t *testing.T) {
	var f modFile
	require.NoError(t, json.Unmarshal([]byte(releaseGoMod), &f))
	r, err := parseRelease("v1.36.1")
	require.NoError(t, err)

	mod, err := goModText(r, f, "/repo", "")
	require.NoError(t, err)
	require.Contains(t, mod, "\tk8s.io/kubernetes v1.36.1\n")
	require.Contains(t, mod, "\tk8s.io/api => k8s.io/api v0.36.1\n")
	require.Contains(t, mod, "\tk8s.io/client-go => k8s.io/client-go v0.36.1\n")
	require.Contains(t, mod, "\tgithub.com/kpsim/kpsim => /repo\n")
	require.Contains(t, mod, "\tgithub.com/kpsim/kpsim/upstream/kube-proxy => /repo/upstream/kube-proxy\n")
	require.NotContains(t, mod, "example/other")
	require.Contains(t, mod, "\tk8s.io/kube-openapi => k8s.io/kube-openapi v0.0.0-20240228011516-70dd3763d340\n")
	require.NotContains(t, mod, "k8s.io/utils =>", "kpsim may need a newer one")
	require.NotContains(t, mod, "k8s.io/kubernetes =>")

	mod, err = goModText(r, f, "/repo", "/src/kubernetes")
	require.NoError(t, err)
	require.Contains(t, mod, "\tk8s.io/kubernetes => /src/kubernetes\n")
	require.Contains(t, mod, "\tk8s.io/client-go => /src/kubernetes/staging/src/k8s.io/client-go\n")

	_, err = goModText(r, modFile{}, "/repo", "")
	require.ErrorContains(t, err, "not a kubernetes release's module file")
}
