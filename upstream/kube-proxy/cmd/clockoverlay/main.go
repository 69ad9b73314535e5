// Command clockoverlay writes the module file with which a kube-proxy
// release is built into a kpsim binary: the release's module file with
// k8s.io/kubernetes replaced by a copy whose proxy sources read the run's
// clock instead of the wall clock, time.Now and time.Since calling package
// releaseclock (which says why), and whose loops that never stop on a node
// (wait.NeverStop: the sync loop, IPVS mode's graceful termination) stop
// when the generation that started them ends (releaseclock.Stop). Run in
// a release module's directory (upstream/kube-proxy-v1.37), it finds the
// k8s.io/kubernetes the module builds with, writes a tree of links to that
// module's files (the rewritten ones copies) in DIR/kubernetes@VERSION,
// and DIR/go.mod and DIR/go.sum (the module's, with the replacement),
// which make kube-proxy hands to go build, vet and test as -modfile. Go
// takes no -overlay of files in its module cache, and a tree of links
// costs a second and 44 MB, not a copy.
//
// A rewrite rather than patches: it is the same few lines of Go for every
// release, it changes no logic (only which clock a call reads), and a
// release whose proxy packages moved fails here, by name, not in a run.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ownReplace matches a module file's replacement of k8s.io/kubernetes, on
// a line of its own or in a replace block.
var ownReplace = regexp.MustCompile(`(?m)^\s*(replace\s+)?k8s\.io/kubernetes(\s+v\S+)?\s*=>.*$`)

// clockPkg is the package the rewritten reads call.
const clockPkg = "github.com/kpsim/kpsim/upstream/kube-proxy/releaseclock"

// rewrites are the release's packages whose reads of the time are
// rewritten, and into what: the proxiers decide by the run's clock (Now,
// Since), and the metrics they observe measure wall time (Measured).
var rewrites = map[string]map[string]string{
	"pkg/proxy":           {"Now": "Now", "Since": "Since"}, // the change trackers' start, against trigger times
	"pkg/proxy/nftables":  {"Now": "Now", "Since": "Since"},
	"pkg/proxy/iptables":  {"Now": "Now", "Since": "Since"},
	"pkg/proxy/ipvs":      {"Now": "Now", "Since": "Since"},
	"pkg/proxy/conntrack": {"Now": "Now", "Since": "Since"},
	"pkg/proxy/metrics":   {"Since": "Measured"},
}

// mustRewrite are the packages every release has a read of the time in:
// one the rewrite finds none in has moved, and the overlay would change
// nothing there.
var mustRewrite = []string{"pkg/proxy/iptables", "pkg/proxy/metrics"}

// waitPkg is the package of wait.NeverStop, the stop channel a release's
// loops are given on a node, where they end with the process. In a kpsim
// process a generation ends and another starts (a restart): its loops are
// given releaseclock.Stop(), closed when it ends, or each generation's
// sync loop would keep its proxier, the whole of its state, to the end of
// the run.
const waitPkg = "k8s.io/apimachinery/pkg/util/wait"

// stoppedAtEnd are the calls whose wait.NeverStop argument is rewritten:
// loops that only stop when it closes, as they would with the process (the
// sync runner's Loop, wait.Until, an informer factory's Start). iptables
// mode's canary Monitor is not one: when its stop closes it deletes the
// canary chains, which a node's dying process never does and which the
// next generation has made its own.
var stoppedAtEnd = []string{"Loop", "Until", "Start"}

func main() {
	out := flag.String("o", "", "write the module file `DIR`/go.mod and what it replaces k8s.io/kubernetes with there")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: clockoverlay -o DIR (in a release module's directory)")
		os.Exit(2)
	}
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "clockoverlay:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	root, required, version, replaced, err := kubernetes()
	if err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	// The tree is named for the version it holds: a replacement by a
	// directory leaves a binary no version of the module to name.
	tree := filepath.Join(out, "kubernetes@"+required)
	if err := linkTree(root, tree); err != nil {
		return err
	}
	count := map[string]int{}
	for pkg, calls := range rewrites {
		files, err := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		if err != nil {
			return err
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			src, n, err := rewrite(file, calls)
			if err != nil {
				return err
			}
			if n == 0 {
				continue
			}
			dst := filepath.Join(tree, pkg, filepath.Base(file))
			if err := os.Remove(dst); err != nil {
				return err
			}
			if err := os.WriteFile(dst, src, 0o644); err != nil {
				return err
			}
			count[pkg] += n
		}
	}
	for _, pkg := range mustRewrite {
		if count[pkg] == 0 {
			return fmt.Errorf("k8s.io/kubernetes %s: no time.Now or time.Since in %s: the release's proxy packages moved; update upstream/kube-proxy/cmd/clockoverlay", version, pkg)
		}
	}
	if err := modFile(out, tree); err != nil {
		return err
	}
	// What the module replaced k8s.io/kubernetes with, if anything, for
	// the binary to name (the build's own replacement is the tree).
	if err := os.WriteFile(filepath.Join(out, "replaced"), []byte(replaced), 0o644); err != nil {
		return err
	}
	pkgs := make([]string, 0, len(count))
	total := 0
	for pkg, n := range count {
		pkgs = append(pkgs, fmt.Sprintf("%s %d", pkg, n))
		total += n
	}
	slices.Sort(pkgs)
	fmt.Fprintf(os.Stderr, "clockoverlay: k8s.io/kubernetes %s: %d reads of the time and loops' stop channels rewritten (%s)\n", version, total, strings.Join(pkgs, ", "))
	return nil
}

// linkTree makes dst a tree of directories mirroring src's, its files
// links to src's.
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		return os.Symlink(p, filepath.Join(dst, rel))
	})
}

// modFile writes out/go.mod, the working directory's module file with
// k8s.io/kubernetes replaced by tree, and out/go.sum beside it (go reads
// the sums next to the module file it is given).
func modFile(out, tree string) error {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		return err
	}
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		return err
	}
	// The module's own replacement of k8s.io/kubernetes, if any, is what
	// the tree was made from.
	mod = ownReplace.ReplaceAll(mod, nil)
	mod = append(mod, fmt.Sprintf("\n// kpsim's build: the release's reads of the time on the run's clock (clockoverlay).\nreplace k8s.io/kubernetes => %s\n", tree)...)
	if err := os.WriteFile(filepath.Join(out, "go.mod"), mod, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "go.sum"), sum, 0o644)
}

// kubernetes is the directory of the k8s.io/kubernetes module the module
// in the working directory builds with, the version it requires, that
// version as a message names it, and the directory that replaces it, if
// one does (a local checkout).
func kubernetes() (dir, required, version, replaced string, err error) {
	var m struct {
		Dir, Version string
		Replace      *struct{ Dir, Version string }
	}
	b, err := exec.Command("go", "list", "-m", "-json", "k8s.io/kubernetes").Output()
	if err != nil {
		return "", "", "", "", fmt.Errorf("go list -m k8s.io/kubernetes (run in a release module's directory): %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return "", "", "", "", err
	}
	if m.Replace != nil && m.Replace.Dir != "" {
		return m.Replace.Dir, m.Version, m.Version + " replaced by " + m.Replace.Dir, m.Replace.Dir, nil
	}
	if m.Dir == "" {
		// Not in the module cache yet (a fresh machine): go build would
		// fetch it, but the overlay is made before the build.
		var d struct{ Dir, Error string }
		b, err := exec.Command("go", "mod", "download", "-json", "k8s.io/kubernetes").Output()
		if jerr := json.Unmarshal(b, &d); jerr != nil || d.Dir == "" {
			return "", "", "", "", fmt.Errorf("go mod download k8s.io/kubernetes %s: %v %s", m.Version, err, d.Error)
		}
		m.Dir = d.Dir
	}
	return m.Dir, m.Version, m.Version, "", nil
}

// rewrite returns file with its calls time.X (X in calls) calling
// releaseclock's calls[X] instead and its arguments wait.NeverStop
// releaseclock.Stop(), and how many it rewrote; 0 leaves the file as it
// is.
func rewrite(file string, calls map[string]string) ([]byte, int, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
	if err != nil {
		return nil, 0, err
	}
	timeName, waitName := importName(f, "time"), importName(f, waitPkg)
	// pkg.X, pkg a package's name: a local variable of that name has an Obj.
	ref := func(e ast.Expr, pkg string) (*ast.Ident, *ast.Ident, bool) {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || pkg == "" {
			return nil, nil, false
		}
		id, ok := sel.X.(*ast.Ident)
		return id, sel.Sel, ok && id.Name == pkg && id.Obj == nil
	}
	n := 0
	left := map[string]int{} // uses of time and wait left
	ast.Inspect(f, func(node ast.Node) bool {
		if call, ok := node.(*ast.CallExpr); ok && stopsAtEnd(call) {
			for i, arg := range call.Args {
				if _, sel, ok := ref(arg, waitName); ok && sel.Name == "NeverStop" {
					call.Args[i] = &ast.CallExpr{Fun: &ast.SelectorExpr{X: ast.NewIdent("releaseclock"), Sel: ast.NewIdent("Stop")}}
					n++
				}
			}
		}
		e, ok := node.(ast.Expr)
		if !ok {
			return true
		}
		if id, sel, ok := ref(e, timeName); ok {
			if to, ok := calls[sel.Name]; ok {
				id.Name, sel.Name = "releaseclock", to
				n++
			} else {
				left["time"]++
			}
		}
		if _, _, ok := ref(e, waitName); ok {
			left[waitPkg]++
		}
		return true
	})
	if n == 0 {
		return nil, 0, nil
	}
	// An import no use is left of would not compile: the first becomes
	// releaseclock's, another goes.
	imported := false
	for _, path := range []string{"time", waitPkg} {
		if importName(f, path) == "" || left[path] > 0 {
			continue
		}
		if imported {
			deleteImport(f, path)
			continue
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == path {
				imp.Path.Value, imp.Name = strconv.Quote(clockPkg), nil
			}
		}
		imported = true
	}
	if !imported {
		addImport(f)
	}
	var b bytes.Buffer
	if err := format.Node(&b, fset, f); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", file, err)
	}
	return b.Bytes(), n, nil
}

// stopsAtEnd reports whether call is X.F(...) with F in stoppedAtEnd.
func stopsAtEnd(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && slices.Contains(stoppedAtEnd, sel.Sel.Name)
}

// importName is the name f imports path under, "" if it does not (or
// imports it as _ or .).
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p != path {
			continue
		}
		if imp.Name == nil {
			return filepath.Base(path)
		}
		if imp.Name.Name != "_" && imp.Name.Name != "." {
			return imp.Name.Name
		}
	}
	return ""
}

// deleteImport removes f's import of path.
func deleteImport(f *ast.File, path string) {
	imported := func(s ast.Spec) bool {
		p, _ := strconv.Unquote(s.(*ast.ImportSpec).Path.Value)
		return p == path
	}
	for i := 0; i < len(f.Decls); i++ {
		g, ok := f.Decls[i].(*ast.GenDecl)
		if !ok || g.Tok != token.IMPORT {
			continue
		}
		g.Specs = slices.DeleteFunc(g.Specs, imported)
		if len(g.Specs) == 0 {
			f.Decls = slices.Delete(f.Decls, i, i+1)
			i--
		}
	}
	f.Imports = slices.DeleteFunc(f.Imports, func(s *ast.ImportSpec) bool { return imported(s) })
}

// addImport adds an import declaration of releaseclock after f's last one
// (a file may have several).
func addImport(f *ast.File) {
	spec := &ast.ImportSpec{Path: &ast.BasicLit{Kind: token.STRING, Value: strconv.Quote(clockPkg)}}
	decl := &ast.GenDecl{Tok: token.IMPORT, Specs: []ast.Spec{spec}}
	last := 0
	for i, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
			last = i + 1
		}
	}
	f.Decls = slices.Insert(f.Decls, last, ast.Decl(decl))
	f.Imports = append(f.Imports, spec)
}
