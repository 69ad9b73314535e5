package kernel

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/kpsim/kpsim/proxier/dataplane"
)

// ipsetCLI is the ipset tool as kube-proxy drives it: every read, create and
// destroy is one `ipset` process, as are batches with the exec strategy (one
// `ipset add|del -exist` per entry, what kube-proxy does) while the restore
// strategy feeds a whole batch to one `ipset restore -exist`.
//
// Entries are validated against their set's type before any process runs;
// the type comes from types (a netlink header request, cached), which is
// cheaper than the `ipset list -t` process kube-proxy would not run either.
type ipsetCLI struct {
	restore bool
	types   *ipsetNetlink
}

var _ dataplane.IPSet = (*ipsetCLI)(nil)

// Sets parses `ipset list -t`: one block of "Key: value" lines per set.
func (c *ipsetCLI) Sets() ([]dataplane.Set, error) {
	out, err := run(nil, "ipset", "list", "-t")
	if err != nil {
		return nil, fmt.Errorf("ipset list -t: %w", err)
	}
	var sets []dataplane.Set
	var cur *dataplane.Set
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		switch k {
		case "Name":
			sets = append(sets, dataplane.Set{Name: v})
			cur = &sets[len(sets)-1]
		case "Type":
			if cur != nil {
				cur.Type = dataplane.SetType(v)
			}
		case "Header":
			if cur != nil {
				if err := parseCLIHeader(cur, v); err != nil {
					return nil, fmt.Errorf("ipset list -t: set %s: %w", cur.Name, err)
				}
			}
		}
	}
	return sets, nil
}

// parseCLIHeader reads "family inet hashsize 1024 maxelem 65536 ..." or "range 0-65535".
func parseCLIHeader(s *dataplane.Set, h string) error {
	f := strings.Fields(h)
	for i := 0; i+1 < len(f); i += 2 {
		switch f[i] {
		case "family":
			s.Family = dataplane.IPv4
			if f[i+1] == "inet6" {
				s.Family = dataplane.IPv6
			}
		case "maxelem":
			n, err := strconv.Atoi(f[i+1])
			if err != nil {
				return fmt.Errorf("maxelem %q", f[i+1])
			}
			s.MaxElem = n
		case "range":
			from, to, _ := strings.Cut(f[i+1], "-")
			a, err1 := strconv.ParseUint(from, 10, 16)
			b, err2 := strconv.ParseUint(to, 10, 16)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("range %q", f[i+1])
			}
			s.PortFrom, s.PortTo = uint16(a), uint16(b)
		}
	}
	return nil
}

// Entries parses `ipset save NAME` and re-formats each entry canonically.
func (c *ipsetCLI) Entries(set string) ([]string, error) {
	out, err := run(nil, "ipset", "save", set)
	if err != nil {
		return nil, fmt.Errorf("ipset save %s: %w", set, err)
	}
	info, err := c.types.typeOf(set)
	if err != nil {
		return nil, err
	}
	entries := []string{}
	prefix := "add " + set + " "
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		e, err := parseEntry(info, strings.Fields(line)[0])
		if err != nil {
			return nil, fmt.Errorf("ipset save %s: %w", set, err)
		}
		entries = append(entries, formatEntry(info.typ, e))
	}
	return entries, nil
}

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
			maxElem = ipsetDefaultMaxElem
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
