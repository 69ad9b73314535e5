package kernel

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/kpsim/kpsim/dataplane"
)

// ipsetCLI is the ipset tool as kube-proxy drives it for writes: every
// create and destroy is one `ipset` process, as are batches with the exec
// strategy (one `ipset add|del -exist` per entry, what kube-proxy does)
// while the restore strategy feeds a whole batch to one `ipset restore
// -exist`. Sets are read back over netlink.
//
// Entries are validated against their set's type before any process runs;
// the type comes from types (a netlink header request, cached), which is
// cheaper than the `ipset list -t` process kube-proxy would not run either.
type ipsetCLI struct {
	restore bool
	types   *ipsetNetlink
}

var _ dataplane.IPSet = (*ipsetCLI)(nil)

// Sets reads every set with its entries in one netlink dump: reading is
// not what the strategy is about, and one dump costs less than any process.
func (c *ipsetCLI) Sets() ([]dataplane.Set, error) { return c.types.Sets() }

// Entries reads one set by the same netlink dump, for the same reason.
func (c *ipsetCLI) Entries(name string) ([]string, error) { return c.types.Entries(name) }

func (c *ipsetCLI) CreateSet(s dataplane.Set) error {
	if err := checkSet(s); err != nil {
		return err
	}
	args := []string{"create", s.Name, string(s.Type)}
	if s.Type == dataplane.BitmapPort {
		args = append(args, "range", fmt.Sprintf("%d-%d", s.PortFrom, s.PortTo))
	} else {
		maxElem := s.MaxElem
		if maxElem <= 0 {
			maxElem = dataplane.DefaultMaxElem
		}
		args = append(args, "family", familyName(setFamily(s)),
			"hashsize", strconv.Itoa(ipsetDefaultHashSize), "maxelem", strconv.Itoa(maxElem))
	}
	if _, err := run(nil, "ipset", args...); err != nil {
		return fmt.Errorf("ipset %s: %w", strings.Join(args, " "), err)
	}
	c.types.remember(s)
	return nil
}

func (c *ipsetCLI) DestroySet(name string) error {
	c.types.forget(name)
	if _, err := run(nil, "ipset", "destroy", name); err != nil {
		return fmt.Errorf("ipset destroy %s: %w", name, err)
	}
	return nil
}

func (c *ipsetCLI) Apply(changes []dataplane.SetChange) error {
	var script bytes.Buffer
	for _, ch := range changes {
		info, err := c.types.typeOf(ch.Set)
		if err != nil {
			return err
		}
		del, err := canonical(info, ch.Set, ch.Del)
		if err != nil {
			return err
		}
		add, err := canonical(info, ch.Set, ch.Add)
		if err != nil {
			return err
		}
		for _, op := range []struct {
			name    string
			entries []string
		}{{"del", del}, {"add", add}} {
			for _, e := range op.entries {
				if c.restore {
					fmt.Fprintf(&script, "%s %s %s\n", op.name, ch.Set, e)
					continue
				}
				if _, err := run(nil, "ipset", op.name, ch.Set, e, "-exist"); err != nil {
					return fmt.Errorf("ipset %s %s %s: %w", op.name, ch.Set, e, err)
				}
			}
		}
	}
	if c.restore && script.Len() > 0 {
		if _, err := run(script.Bytes(), "ipset", "restore", "-exist"); err != nil {
			return fmt.Errorf("ipset restore (%d lines): %w", bytes.Count(script.Bytes(), []byte{'\n'}), err)
		}
	}
	return nil
}
