// Command releasemodule writes the Go module that builds kpsim with a
// kube-proxy release that has no module folder in the repository
// (upstream/kube-proxy-v1.37 and its siblings are the checked-in ones):
//
//	releasemodule -o DIR [-kubernetes CHECKOUT] v1.36.3
//
// DIR gets a go.mod that requires k8s.io/kubernetes at the release and
// pins its staging modules (k8s.io/api, k8s.io/client-go, ...) where the
// release's own go.mod points them into its staging tree: at the staging
// version of the same release (v0.36.3), or, with -kubernetes, into the
// checkout's staging tree, with k8s.io/kubernetes replaced by the checkout
// (a local patch). It also gets the command, cmd/kpsim (kpsim with the
// shared adapter, package kubeproxy, compiled for that release), and its
// test, TestRestartOnSim; then go mod tidy.
//
// `releasemodule -tags v1.36.3` prints the build tags that select the
// adapter's files for the release: where kube-proxy's API moved between
// 1.30 and 1.37, as compiling each release found (docs/releases-on-the-sim.md).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	out := flag.String("o", "", "write the module to `DIR`")
	checkout := flag.String("kubernetes", "", "build the kubernetes `CHECKOUT` (a local patch of the release) instead of the release's module")
	tags := flag.Bool("tags", false, "print the release's build tags and exit")
	flag.Parse()
	if flag.NArg() != 1 || (*out == "" && !*tags) {
		fmt.Fprintln(os.Stderr, "usage: releasemodule -o DIR [-kubernetes CHECKOUT] vX.Y.Z | releasemodule -tags vX.Y.Z")
		os.Exit(2)
	}
	r, err := parseRelease(flag.Arg(0))
	if err == nil && *tags {
		fmt.Println(strings.Join(r.tags(), " "))
		return
	}
	if err == nil && r.patch < 0 {
		err = fmt.Errorf("%s: name the release's patch too (v1.%d.Z)", r.name, r.minor)
	}
	if err == nil {
		err = write(*out, r, *checkout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "releasemodule:", err)
		os.Exit(1)
	}
}

// release is a kube-proxy release, v1.MINOR.PATCH (patch -1 where only
// the minor is named).
type release struct {
	name         string
	minor, patch int
}

// releaseName is v1.MINOR.PATCH, or v1.MINOR where only the tags are asked
// for (the Makefile's checked-in releases, v1.37).
var releaseName = regexp.MustCompile(`^v1\.(\d+)(?:\.(\d+))?$`)

// oldest is the first minor the adapter knows: kpsim's releases start at
// 1.30 (the oldest it pins).
const oldest = 30

func parseRelease(s string) (release, error) {
	m := releaseName.FindStringSubmatch(s)
	if m == nil {
		return release{}, fmt.Errorf("%q is not a kube-proxy release (v1.MINOR.PATCH, e.g. v1.36.3)", s)
	}
	minor, _ := strconv.Atoi(m[1])
	patch := -1
	if m[2] != "" {
		patch, _ = strconv.Atoi(m[2])
	}
	if minor < oldest {
		return release{}, fmt.Errorf("%s: kpsim runs kube-proxy from v1.%d on", s, oldest)
	}
	return release{name: s, minor: minor, patch: patch}, nil
}

// eras are where the API the adapter calls moved: a release before minor
// builds with tag. Each tag holds for every older release too.
var eras = []struct {
	minor int
	tag   string
}{
	{37, "kpsim_k8s_before_1_37"}, // NewProxier takes the KubeProxyConfiguration
	{34, "kpsim_k8s_before_1_34"}, // the proxier hears its Node itself; the cleanups take utilities
	{33, "kpsim_k8s_before_1_33"}, // utilities take an exec; pkg/util/async runs syncs; client-go hands reactors no list options
	{32, "kpsim_k8s_before_1_32"}, // conntrack clears by address and port
	{31, "kpsim_k8s_before_1_31"}, // no context; the local detector in pkg/proxy/util/iptables
}

func (r release) tags() []string {
	var out []string
	for _, e := range eras {
		if r.minor < e.minor {
			out = append(out, e.tag)
		}
	}
	return out
}

// staging is the version of the release's staging modules: v0.MINOR.PATCH.
func (r release) staging() string { return fmt.Sprintf("v0.%d.%d", r.minor, r.patch) }

// waitsForHandlers says whether the release has kubernetes PR #126532 (its
// first sync after a restart waits for its handlers): 1.31 on, and 1.30
// from v1.30.5.
func (r release) waitsForHandlers() bool { return r.minor > 30 || r.patch >= 5 }

// modFile is what `go mod edit -json` prints of a go.mod, the part read here.
type modFile struct {
	Require []struct{ Path, Version string }
	Replace []struct {
		Old struct{ Path string }
		New struct{ Path, Version string }
	}
}

// ownVersions are modules kept at the version the release requires,
// whatever kpsim's own module asks for: the OpenAPI packages its staging
// modules compile against. kpsim's client-go pulls newer ones, which
// releases before 1.33 do not compile with (structured-merge-diff v6 for
// v4, gnostic-models 0.7's protobuf types).
var ownVersions = []string{"k8s.io/kube-openapi", "github.com/google/gnostic-models"}

// releaseReplaces returns the release's own go.mod replacements (its
// staging modules, relative to the kubernetes tree).
func releaseReplaces(r release, checkout string) (modFile, error) {
	gomod := filepath.Join(checkout, "go.mod")
	if checkout == "" {
		dl, err := goCmd("", "mod", "download", "-json", "k8s.io/kubernetes@"+r.name)
		if err != nil {
			return modFile{}, fmt.Errorf("k8s.io/kubernetes %s: %v", r.name, err)
		}
		var m struct{ GoMod, Error string }
		if err := json.Unmarshal(dl, &m); err != nil {
			return modFile{}, err
		}
		if m.Error != "" {
			return modFile{}, fmt.Errorf("k8s.io/kubernetes %s: %s", r.name, m.Error)
		}
		gomod = m.GoMod
	}
	js, err := goCmd("", "mod", "edit", "-json", gomod)
	if err != nil {
		return modFile{}, err
	}
	var f modFile
	return f, json.Unmarshal(js, &f)
}

// goModText is the module file of DIR for the release: kpsim from the
// repository it is run in, the release and its staging modules pinned.
func goModText(r release, f modFile, repo, checkout string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "// Written by releasemodule for kube-proxy %s; make kube-proxy RELEASE=%s writes it again.\n\n", r.name, r.name)
	fmt.Fprintf(&b, "module github.com/kpsim/kpsim/upstream/kube-proxy-release\n\ngo 1.26.0\n\nrequire (\n\tk8s.io/kubernetes %s\n", r.name)
	b.WriteString("\tgithub.com/kpsim/kpsim v0.0.0\n\tgithub.com/kpsim/kpsim/upstream/kube-proxy v0.0.0\n)\n\nreplace (\n")
	fmt.Fprintf(&b, "\tgithub.com/kpsim/kpsim => %s\n", repo)
	fmt.Fprintf(&b, "\tgithub.com/kpsim/kpsim/upstream/kube-proxy => %s\n", filepath.Join(repo, "upstream", "kube-proxy"))
	if checkout != "" {
		fmt.Fprintf(&b, "\tk8s.io/kubernetes => %s\n", checkout)
	}
	n := 0
	for _, rep := range f.Replace {
		dir, ok := strings.CutPrefix(rep.New.Path, "./staging/src/")
		if !ok {
			continue // the release's other replacements apply to its own build only
		}
		n++
		if checkout != "" {
			fmt.Fprintf(&b, "\t%s => %s\n", rep.Old.Path, filepath.Join(checkout, "staging", "src", dir))
		} else {
			fmt.Fprintf(&b, "\t%s => %s %s\n", rep.Old.Path, rep.Old.Path, r.staging())
		}
	}
	if n == 0 {
		return "", fmt.Errorf("k8s.io/kubernetes %s: its go.mod replaces no module with ./staging/src: not a kubernetes release's module file", r.name)
	}
	for _, req := range f.Require {
		if slices.Contains(ownVersions, req.Path) {
			fmt.Fprintf(&b, "\t%s => %s %s\n", req.Path, req.Path, req.Version)
		}
	}
	b.WriteString(")\n")
	return b.String(), nil
}

const mainText = `// Written by releasemodule for kube-proxy %[1]s.

// Command kpsim is kpsim with kube-proxy %[1]s's own proxiers as a proxier
// implementation (proxier.implementation=kube-proxy@%[1]s%[2]s).
package main

import (
	"github.com/kpsim/kpsim/cmd/kpsim/cli"
	kubeproxy "github.com/kpsim/kpsim/upstream/kube-proxy"
)

// Set by the Makefile: go build -ldflags "-X main.version=... -X main.commit=...".
var version, commit = "dev", ""

// main is kpsim's command line with the release as a proxier implementation.
func main() {
	kubeproxy.Built.Register()
	cli.Main(version, commit)
}
`

const testText = `// Written by releasemodule for kube-proxy %[1]s.

package main

import (
	"testing"

	kubeproxy "github.com/kpsim/kpsim/upstream/kube-proxy"
	"github.com/kpsim/kpsim/upstream/kube-proxy/kubeproxytest"
)

// TestRestartOnSim: kube-proxy %[1]s on the in-memory kernel through a
// restart whose handlers lag, on the modeled clock (it %[2]s for its
// handlers before its first sync: kubernetes PR #126532).
func TestRestartOnSim(t *testing.T) {
	kubeproxytest.RestartOnSim(t, kubeproxy.Built, %[3]t)
}
`

func write(out string, r release, checkout string) error {
	repo, err := goCmd("", "list", "-m", "-f", "{{.Dir}}", "github.com/kpsim/kpsim")
	if err != nil {
		return fmt.Errorf("run it in kpsim's repository: %v", err)
	}
	if checkout != "" {
		if checkout, err = filepath.Abs(checkout); err != nil {
			return err
		}
	}
	f, err := releaseReplaces(r, checkout)
	if err != nil {
		return err
	}
	mod, err := goModText(r, f, strings.TrimSpace(string(repo)), checkout)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	cmd := filepath.Join(out, "cmd", "kpsim") // where the checked-in modules have it
	if err := os.MkdirAll(cmd, 0o755); err != nil {
		return err
	}
	patched, waits := "", "waits"
	if checkout != "" {
		patched = " (k8s.io/kubernetes replaced by " + checkout + ")"
	}
	if !r.waitsForHandlers() {
		waits = "does not wait"
	}
	files := map[string]string{
		filepath.Join(out, "go.mod"):       mod,
		filepath.Join(cmd, "main.go"):      fmt.Sprintf(mainText, r.name, patched),
		filepath.Join(cmd, "main_test.go"): fmt.Sprintf(testText, r.name, waits, !r.waitsForHandlers()),
	}
	for name, text := range files {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			return err
		}
	}
	// The requirements of what the release's build and test import, with its
	// tags (go list -mod=mod adds them): go mod tidy would read every file of
	// package kubeproxy, whatever its tags, and raise k8s.io/kubernetes to a
	// release that has the packages a later era's files import.
	if _, err := goCmd(out, "list", "-mod=mod", "-tags="+strings.Join(r.tags(), ","), "-deps", "-test", "./..."); err != nil {
		return fmt.Errorf("in %s: %v", out, err)
	}
	fmt.Fprintf(os.Stderr, "releasemodule: kube-proxy %s in %s (build tags: %s)\n", r.name, out, strings.Join(r.tags(), " "))
	return nil
}

// goCmd runs the go command in dir and returns its output; its error
// carries what it printed on stderr.
func goCmd(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return b, nil
}
