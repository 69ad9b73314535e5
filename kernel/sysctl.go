package kernel

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kpsim/kpsim/dataplane"
)

// sysctls is dataplane.Sysctls over /proc/sys. The net.* keys there are those
// of the reading process's network namespace, which is why kpsim moves the
// whole process into the run's namespace rather than one thread.
type sysctls struct{}

var _ dataplane.Sysctls = sysctls{}

// sysctlPath turns "net/ipv4/vs/conntrack" (or the dotted form
// "net.ipv4.vs.conntrack") into its /proc/sys file, refusing keys that would
// leave /proc/sys.
func sysctlPath(key string) (string, error) {
	k := key
	if !strings.Contains(k, "/") {
		k = strings.ReplaceAll(k, ".", "/")
	}
	for _, part := range strings.Split(k, "/") {
		if part == "" || part == "." || part == ".." {
			return "", fmt.Errorf("sysctl %q: bad key: %w", key, unix.EINVAL)
		}
	}
	return "/proc/sys/" + k, nil
}

func (sysctls) Sysctl(key string) (string, error) {
	p, err := sysctlPath(key)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("sysctl %s: %w", key, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (sysctls) SetSysctl(key, value string) error {
	p, err := sysctlPath(key)
	if err != nil {
		return err
	}
	// O_WRONLY without O_CREATE: an unknown key is ENOENT, not a new file.
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	return nil
}
