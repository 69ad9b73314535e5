// Package netns keeps kpsim's kernel work out of the network namespace it
// was started in: RunIsolated re-executes the process in a fresh namespace,
// Isolated tells the child it may work, and the named namespaces a run
// creates around it (a client, the pods) are made, entered, listed and
// cleaned up here, also after a crash (`kpsim clean`).
package netns

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The isolation rule: kernel work never happens in the network namespace kpsim
// was started in. RunIsolated re-executes the binary in a fresh network
// namespace; the child finds isolatedEnv set to the inode of its parent's
// namespace and Isolated checks that its own namespace is a different one, so
// a marker copied into the wrong environment cannot switch the check off.
const isolatedEnv = "KPSIM_ISOLATED_FROM_NETNS"

// Dir is where named network namespaces live (iproute2's convention).
const Dir = "/run/netns"

// Prefix starts the name of every named namespace a run creates:
// kpsim-<pid of the isolated process>-<role>. `kpsim clean` relies on it.
const Prefix = "kpsim-"

// netnsInode returns the inode of the network namespace of the calling thread.
func netnsInode() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), &st); err != nil {
		return 0, fmt.Errorf("stat own network namespace: %w", err)
	}
	return st.Ino, nil
}

// Isolated reports whether this process is a child that RunIsolated started in
// a network namespace of its own.
func Isolated() bool {
	v := os.Getenv(isolatedEnv)
	if v == "" {
		return false
	}
	parent, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return false
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	own, err := netnsInode()
	return err == nil && own != parent
}

// ErrNotIsolated is returned by kernel work attempted outside an isolated child.
var ErrNotIsolated = errors.New("refusing kernel work in the network namespace kpsim was started in (not re-executed by netns.RunIsolated)")

// RunIsolated runs the current executable with args in a fresh network
// namespace and waits for it. Standard streams are the child's own; SIGINT,
// SIGTERM and SIGHUP sent to this process are forwarded once (the child is in
// its own process group, so a terminal's Ctrl-C reaches it only through us and
// it can clean up on the first signal). Whatever named namespaces the child
// left behind (it crashed, or was killed) are deleted after it exits. The
// returned code is the child's exit status, or 128+signal if a signal killed it.
func RunIsolated(args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if os.Geteuid() != 0 {
		return 0, errors.New("the kernel backend needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network namespaces")
	}
	// Pdeathsig is tied to the thread that forks: keep this goroutine on it
	// until the child is reaped, so the child hears of our death.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	own, err := netnsInode()
	if err != nil {
		return 0, err
	}
	exe, err := os.Executable()
	if err != nil {
		return 0, fmt.Errorf("find own executable: %w", err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Args[0] = os.Args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", isolatedEnv, own))
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET,
		Setpgid:    true,
		Pdeathsig:  syscall.SIGTERM,
	}
	hadNetnsDir := DirExists()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s in a new network namespace: %w", exe, err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	werr := cmd.Wait()
	close(done)
	cleanErr := removeNamedNetns(cmd.Process.Pid)
	if !hadNetnsDir {
		RemoveDirIfEmpty()
	}
	code := 0
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	default:
		return 0, fmt.Errorf("wait for isolated child %d: %w", cmd.Process.Pid, werr)
	}
	if cleanErr != nil {
		return code, fmt.Errorf("isolated child %d exited %d and left namespaces behind: %w", cmd.Process.Pid, code, cleanErr)
	}
	return code, nil
}

// Namespace is a named network namespace made by this process.
type Namespace struct {
	Name   string
	handle vnetns.NsHandle
}

// Name is the name of this process's namespace for a role ("client", "pods").
func Name(role string) string {
	return fmt.Sprintf("%s%d-%s", Prefix, os.Getpid(), role)
}

// New creates a named network namespace for role with its loopback up.
// It must run in an isolated process: the namespaces it makes are peers of
// the node namespace, and nothing links them to the host.
func New(role string) (*Namespace, error) {
	if !Isolated() {
		return nil, ErrNotIsolated
	}
	return newNamedNetns(Name(role))
}

func newNamedNetns(name string) (*Namespace, error) {
	// No handle yet: the zero NsHandle is file descriptor 0, which a failed
	// create must not close.
	n := &Namespace{Name: name, handle: vnetns.None()}
	// Creating a namespace moves the creating thread into it.
	create := func() error {
		h, err := vnetns.NewNamed(name)
		if err != nil {
			return fmt.Errorf("netns %s: create: %w", name, err)
		}
		n.handle = h
		return nil
	}
	if err := onNetnsThread(name, create, nil); err != nil {
		if n.handle.IsOpen() {
			n.Delete()
		}
		return nil, err
	}
	if err := n.Do(func() error { return SetLinkUp("lo") }); err != nil {
		n.Delete()
		return nil, err
	}
	return n, nil
}

// Do runs f on an OS thread inside the namespace. Sockets f opens stay in
// the namespace after f returns and may be used from any goroutine.
func (n *Namespace) Do(f func() error) error {
	return doInNetns(n.handle, n.Name, f)
}

// Handle returns the namespace's file descriptor (valid until Delete).
func (n *Namespace) Handle() vnetns.NsHandle { return n.handle }

// Delete removes the namespace's name and closes this process's handle; the
// kernel frees the namespace and its links once nothing else holds it.
func (n *Namespace) Delete() error {
	if n.handle.IsOpen() {
		n.handle.Close()
	}
	return deleteNamedNetns(n.Name)
}

func doInNetns(h vnetns.NsHandle, name string, f func() error) error {
	enter := func() error {
		if err := vnetns.Set(h); err != nil {
			return fmt.Errorf("netns %s: enter: %w", name, err)
		}
		return nil
	}
	return onNetnsThread(name, enter, f)
}

// onNetnsThread runs enter, which moves the calling OS thread into another
// network namespace, then f (if any) there, on a thread of its own; then it
// moves the thread back to the namespace it came from. A thread that cannot
// go back is never reused: it stays locked and ends with its goroutine.
func onNetnsThread(name string, enter, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := vnetns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns %s: get current: %w", name, err)
			return
		}
		defer orig.Close()
		err = enter()
		if err == nil && f != nil {
			err = f()
		}
		// Go back even when enter failed: it may have moved the thread first.
		if serr := vnetns.Set(orig); serr != nil {
			errc <- errors.Join(err, fmt.Errorf("netns %s: return to the node namespace: %w", name, serr))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

func deleteNamedNetns(name string) error {
	p := filepath.Join(Dir, name)
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netns %s: unmount: %w", name, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("netns %s: remove: %w", name, err)
	}
	return nil
}

// DirExists tells whether Dir exists: whoever creates it (netns
// creation does, when it is missing) removes it again once empty, so that
// /run is left as it was found.
func DirExists() bool {
	_, err := os.Stat(Dir)
	return err == nil
}

func RemoveDirIfEmpty() {
	entries, err := os.ReadDir(Dir)
	if err == nil && len(entries) == 0 {
		_ = os.Remove(Dir)
	}
}

// Named is a named namespace a kpsim run left behind.
type Named struct {
	Name string
	PID  int // the run's isolated process
}

// List lists named namespaces made by kpsim runs; pid 0 lists every run's.
func List(pid int) ([]Named, error) {
	entries, err := os.ReadDir(Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", Dir, err)
	}
	var out []Named
	for _, e := range entries {
		p, ok := parseNetnsName(e.Name())
		if !ok || pid != 0 && p != pid {
			continue
		}
		out = append(out, Named{Name: e.Name(), PID: p})
	}
	return out, nil
}

// parseNetnsName returns the pid in kpsim-<pid>-<role>.
func parseNetnsName(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return 0, false
	}
	num, role, ok := strings.Cut(rest, "-")
	if !ok || role == "" {
		return 0, false
	}
	pid, err := strconv.Atoi(num)
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

func removeNamedNetns(pid int) error {
	stale, err := List(pid)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range stale {
		errs = append(errs, deleteNamedNetns(s.Name))
	}
	return errors.Join(errs...)
}

// CleanReport says what Clean found and removed.
type CleanReport struct {
	Removed []string // namespace names
	Kept    []string // namespaces of runs still in progress
	Killed  []int    // orphaned isolated processes signalled
}

// Clean removes what crashed runs left: named namespaces whose run is gone
// (or every kpsim namespace with force), and isolated kpsim processes whose
// parent died (their parent's death signal was lost, for example when the
// parent was killed with SIGKILL before the child set up). A namespace whose
// process is alive belongs to a run in progress and is kept unless force.
func Clean(force bool) (CleanReport, error) {
	var rep CleanReport
	var errs []error
	for _, pid := range orphanedIsolated() {
		if err := syscall.Kill(pid, syscall.SIGTERM); err == nil {
			rep.Killed = append(rep.Killed, pid)
		}
	}
	for _, pid := range rep.Killed {
		waitGone(pid, 5*time.Second)
	}
	stale, err := List(0)
	if err != nil {
		return rep, err
	}
	for _, s := range stale {
		if !force && processAlive(s.PID) {
			rep.Kept = append(rep.Kept, s.Name)
			continue
		}
		if err := deleteNamedNetns(s.Name); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Removed = append(rep.Removed, s.Name)
	}
	return rep, errors.Join(errs...)
}

// processAlive reports whether pid is a live kpsim-isolated process (a reused
// pid of an unrelated process does not count).
func processAlive(pid int) bool {
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	return hasEnv(env, isolatedEnv)
}

func hasEnv(environ []byte, key string) bool {
	for _, kv := range strings.Split(string(environ), "\x00") {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

// orphanedIsolated lists isolated kpsim processes whose RunIsolated parent
// is gone: the top of an isolated process tree (its parent carries no
// marker, which excludes the tools it runs) whose parent is no longer the
// same executable (it was re-parented to init or a subreaper).
func orphanedIsolated() []int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() || !processAlive(pid) {
			continue
		}
		ppid := parentPID(pid)
		if ppid <= 0 || processAlive(ppid) {
			continue
		}
		exe, err1 := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		pexe, err2 := os.Readlink(fmt.Sprintf("/proc/%d/exe", ppid))
		if err1 == nil && (err2 != nil || exe != pexe) {
			out = append(out, pid)
		}
	}
	return out
}

func parentPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may contain spaces and parentheses: fields start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func waitGone(pid int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// LoopbackUp brings lo up in an isolated process's namespace. A fresh
// namespace has it down, and with no local routing table the kernel takes
// every address for a broadcast address: IPVS then refuses real servers
// (EINVAL) and nothing can be bound to 127.0.0.1.
func LoopbackUp() error {
	if !Isolated() {
		return ErrNotIsolated
	}
	return SetLinkUp("lo")
}

// SetLinkUp brings a link of the calling thread's namespace up.
func SetLinkUp(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find link %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("set link %s up: %w", name, err)
	}
	return nil
}
