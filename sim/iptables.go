package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/kpsim/kpsim/dataplane"
)

// builtinChains are each table's built-in chains in the order iptables-save prints them.
var builtinChains = map[string][]string{
	"filter": {"INPUT", "FORWARD", "OUTPUT"},
	"nat":    {"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"},
	"mangle": {"PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"},
	"raw":    {"PREROUTING", "OUTPUT"},
}

// targets are the target extensions a rule may jump to besides a chain.
var targets = map[string]bool{
	"ACCEPT": true, "DROP": true, "RETURN": true, "QUEUE": true, "REJECT": true,
	"MASQUERADE": true, "MARK": true, "CONNMARK": true, "SNAT": true, "DNAT": true,
	"REDIRECT": true, "LOG": true, "NFLOG": true, "NFQUEUE": true, "NOTRACK": true,
	"CT": true, "TPROXY": true, "TCPMSS": true, "CHECKSUM": true, "CLASSIFY": true,
	"SET": true, "TRACE": true, "AUDIT": true,
}

// maxChainName is XT_EXTENSION_MAXNAMELEN (29) less the terminating NUL.
const maxChainName = 28

type table struct {
	chains map[string]*chain
	// flushed counts the rules a payload applied to this (staged) copy
	// emptied out of chains: a kernel removes them one by one. written
	// counts the rules it appended or inserted, declared the chains it
	// declared (created or flushed); replaced, whether it flushed a chain
	// that existed (IPTablesRestoreCost).
	flushed, written, declared int
	replaced                   bool
}

type chain struct {
	builtin bool
	policy  string // ACCEPT or DROP for built-in chains, "-" otherwise
	rules   []rule
}

// rule is one rule as iptables-save prints it after "-A CHAIN "
// (dataplane.CanonicalRule: a rule restored in any spelling is printed as
// the kernel prints it, and -D finds it in any spelling), with what it
// references pulled out for the reference checks, and compiled for Probe.
type rule struct {
	text  string
	jump  string   // -j / -g target or chain
	sets  []string // --match-set names
	probe probeRule
}

func newTables() map[dataplane.Family]map[string]*table {
	out := make(map[dataplane.Family]map[string]*table)
	for _, f := range []dataplane.Family{dataplane.IPv4, dataplane.IPv6} {
		out[f] = make(map[string]*table)
		for name, builtins := range builtinChains {
			t := &table{chains: make(map[string]*chain)}
			for _, c := range builtins {
				t.chains[c] = &chain{builtin: true, policy: "ACCEPT"}
			}
			out[f][name] = t
		}
	}
	return out
}

// clone copies the table so a payload can be applied to the copy and
// committed or dropped as a whole. Rules are immutable and shared.
func (t *table) clone() *table {
	c := &table{chains: make(map[string]*chain, len(t.chains))}
	for name, ch := range t.chains {
		cp := *ch
		cp.rules = slices.Clip(ch.rules)
		c.chains[name] = &cp
	}
	return c
}

// referrer names a chain of t, other than skip, with a rule that jumps to name.
func (t *table) referrer(name, skip string) string {
	for cn, ch := range t.chains {
		if cn == skip {
			continue
		}
		for _, r := range ch.rules {
			if r.jump == name {
				return cn
			}
		}
	}
	return ""
}

// setReference names a rule that matches set name, or returns "".
func (k *Kernel) setReference(name string) string {
	for f, tables := range k.tables {
		for tn, t := range tables {
			for cn, ch := range t.chains {
				for _, r := range ch.rules {
					if slices.Contains(r.sets, name) {
						return fmt.Sprintf("%s %s chain %s", f, tn, cn)
					}
				}
			}
		}
	}
	return ""
}

// Restore applies an iptables-restore payload with --noflush semantics:
// tables not named keep their state, built-in chains keep their rules, a
// chain declared with ":NAME - [0:0]" is created or flushed, rules are
// appended (-A), inserted (-I) or deleted (-D), and -F, -X, -N, -P behave as
// in iptables. A rule must jump to a built-in target or a chain existing at
// that line, may only match sets that exist (and are of the payload's
// family), and -X refuses a chain that is referenced or not empty. The
// payload is all or nothing. Every failure is EINVAL with its line number:
// iptables-restore reports nothing finer than its exit status and message.
func (k *Kernel) Restore(f dataplane.Family, payload []byte) error {
	k.lock()
	defer k.unlock()
	k.count(dataplane.OpIPTablesRestore, 1)
	k.count(dataplane.OpIPTablesRestoreBytes, len(payload))
	if k.faulty(dataplane.OpIPTablesRestore) {
		if err := k.fault(dataplane.OpIPTablesRestore, string(payload)); err != nil {
			return errorf(err, "iptables-restore %s", f)
		}
	}
	tables, ok := k.tables[f]
	if !ok {
		return errorf(syscall.EINVAL, "iptables-restore: unknown family %q", f)
	}
	staged, err := k.parseRestore(f, tables, payload)
	if err != nil {
		return errorf(syscall.EINVAL, "iptables-restore %s: %v", f, err)
	}
	flushed, replaced, cost := 0, false, 0.0
	r := k.costs.restore
	for _, t := range staged {
		flushed += t.flushed
		replaced = replaced || t.replaced
		cost += r.Price(t.written, t.declared, len(t.chains))
		t.flushed, t.written, t.declared, t.replaced = 0, 0, 0, false
	}
	// Replacing rules costs more than writing new ones: the table is read
	// back, and each rule flushed is removed. And each rule written costs
	// more the more chains the payload declares and its table holds
	// (docs/kernel-costs.md, "iptables-restore at iptables mode's sizes").
	if replaced {
		cost += r.Replace
	}
	k.charge(seconds(k.costs.item[dataplane.OpIPTablesRestore]*float64(flushed) + cost))
	maps.Copy(tables, staged)
	return nil
}

// Command runs one iptables command as one process. It is priced per
// command (OpIPTablesCommand: a process that reads its table, and writes
// it back when the command changes it), per rule or chain it removes (its
// item price: a deletion commits slower than an addition, docs/kernel-costs.md)
// and per rule it writes as a restore is. kube-proxy runs one per chain
// and jump it ensures and per step of its cleanups.
func (k *Kernel) Command(f dataplane.Family, tableName string, args ...string) error {
	k.lock()
	defer k.unlock()
	k.count(dataplane.OpIPTablesCommand, 1)
	what := fmt.Sprintf("iptables %s -t %s %s", f, tableName, strings.Join(args, " "))
	if k.faulty(dataplane.OpIPTablesCommand) {
		if err := k.fault(dataplane.OpIPTablesCommand, what); err != nil {
			return errorf(err, "%s", what)
		}
	}
	t, ok := k.tables[f][tableName]
	if !ok || len(args) == 0 {
		return errorf(syscall.EINVAL, "%s: unknown family, table or command", what)
	}
	cmd := args[0]
	var chain *chain
	if len(args) > 1 {
		chain = t.chains[args[1]]
	}
	switch {
	case cmd == "-N" || cmd == "--new-chain":
		if chain != nil {
			return errorf(fs.ErrExist, "%s: chain exists", what)
		}
	case len(args) > 1 && chain == nil:
		return errorf(fs.ErrNotExist, "%s: no such chain", what)
	case cmd == "-C" || cmd == "--check" || cmd == "-D" || cmd == "--delete":
		r, err := k.parseRule(f, t, args[2:])
		if err != nil { // a rule jumping to no chain or matching no set: iptables says none is there
			return errorf(fs.ErrNotExist, "%s: %v", what, err)
		}
		if !slices.ContainsFunc(chain.rules, func(x rule) bool { return x.text == r.text }) {
			return errorf(fs.ErrNotExist, "%s: no such rule", what)
		}
		if cmd == "-C" || cmd == "--check" {
			return nil
		}
	}
	staged := t.clone()
	if err := k.command(f, staged, args); err != nil {
		return errorf(syscall.EINVAL, "%s: %v", what, err)
	}
	removed := staged.flushed
	if cmd == "-D" || cmd == "--delete" || cmd == "-X" || cmd == "--delete-chain" {
		removed++
	}
	k.charge(seconds(k.costs.item[dataplane.OpIPTablesCommand]*float64(removed) +
		k.costs.restore.Price(staged.written, staged.declared, len(staged.chains))))
	staged.flushed, staged.written, staged.declared, staged.replaced = 0, 0, 0, false
	k.tables[f][tableName] = staged
	return nil
}

func (k *Kernel) parseRestore(f dataplane.Family, tables map[string]*table, payload []byte) (map[string]*table, error) {
	staged := make(map[string]*table)
	var cur *table
	var curName string
	lineNo := 0
	for len(payload) > 0 {
		lineNo++
		var line []byte
		line, payload, _ = bytes.Cut(payload, []byte{'\n'})
		s := strings.TrimSpace(string(line))
		if s == "" || s[0] == '#' {
			continue
		}
		fail := func(format string, args ...any) error {
			return fmt.Errorf("line %d: %s", lineNo, fmt.Sprintf(format, args...))
		}
		switch {
		case s[0] == '*':
			if cur != nil {
				return nil, fail("table %s not committed before %s", curName, s)
			}
			curName = s[1:]
			t, ok := tables[curName]
			if !ok {
				return nil, fail("unknown table %q", curName)
			}
			if _, ok := staged[curName]; ok {
				cur = staged[curName]
			} else {
				cur = t.clone()
			}
			continue
		case s == "COMMIT":
			if cur == nil {
				return nil, fail("COMMIT outside a table")
			}
			staged[curName] = cur
			cur = nil
			continue
		}
		if cur == nil {
			return nil, fail("%q outside a table", s)
		}
		if s[0] == ':' {
			if err := declareChain(cur, s[1:]); err != nil {
				return nil, fail("%v", err)
			}
			continue
		}
		if s[0] == '[' { // per-rule counters from --counters
			if i := strings.IndexByte(s, ']'); i > 0 {
				s = strings.TrimSpace(s[i+1:])
			}
		}
		args, err := dataplane.SplitRule(s)
		if err != nil {
			return nil, fail("%v", err)
		}
		if err := k.command(f, cur, args); err != nil {
			return nil, fail("%v", err)
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: COMMIT expected", lineNo+1)
	}
	return staged, nil
}

func declareChain(t *table, decl string) error {
	fields := strings.Fields(decl)
	if len(fields) < 2 {
		return fmt.Errorf("bad chain declaration %q", decl)
	}
	name, policy := fields[0], fields[1]
	if c, ok := t.chains[name]; ok && c.builtin {
		return setPolicy(c, name, policy)
	}
	if policy != "-" {
		return fmt.Errorf("cannot set policy %s on user-defined chain %s", policy, name)
	}
	if len(name) > maxChainName {
		return fmt.Errorf("chain name %q longer than %d", name, maxChainName)
	}
	t.declared++
	if c, ok := t.chains[name]; ok {
		t.flush(c)
		return nil
	}
	t.chains[name] = &chain{policy: "-"}
	return nil
}

// flush empties a chain, counting its rules.
func (t *table) flush(c *chain) {
	t.flushed += len(c.rules)
	t.replaced = true
	c.rules = nil
}

func setPolicy(c *chain, name, policy string) error {
	switch policy {
	case "-":
	case "ACCEPT", "DROP":
		c.policy = policy
	default:
		return fmt.Errorf("bad policy %q for chain %s", policy, name)
	}
	return nil
}

// command applies one rule command to the staged table t.
func (k *Kernel) command(f dataplane.Family, t *table, args []string) error {
	if len(args) == 0 {
		return nil
	}
	cmd, args := args[0], args[1:]
	chainArg := func() (*chain, string, error) {
		if len(args) == 0 {
			return nil, "", fmt.Errorf("%s needs a chain", cmd)
		}
		c, ok := t.chains[args[0]]
		if !ok {
			return nil, args[0], fmt.Errorf("%s: no chain %q", cmd, args[0])
		}
		return c, args[0], nil
	}
	switch cmd {
	case "-A", "--append", "-I", "--insert", "-D", "--delete":
		c, name, err := chainArg()
		if err != nil {
			return err
		}
		spec := args[1:]
		pos := -1 // append
		if cmd == "-I" || cmd == "--insert" {
			pos = 0
			if len(spec) > 0 {
				if n, err := strconv.Atoi(spec[0]); err == nil {
					if n < 1 || n > len(c.rules)+1 {
						return fmt.Errorf("-I %s %d: index out of range", name, n)
					}
					pos, spec = n-1, spec[1:]
				}
			}
		}
		r, err := k.parseRule(f, t, spec)
		if err != nil {
			return fmt.Errorf("%s %s: %v", cmd, name, err)
		}
		switch {
		case cmd == "-D" || cmd == "--delete":
			i := slices.IndexFunc(c.rules, func(x rule) bool { return x.text == r.text })
			if i < 0 {
				return fmt.Errorf("-D %s %s: no such rule", name, r.text)
			}
			c.rules = slices.Delete(slices.Clip(c.rules), i, i+1)
		case pos < 0:
			c.rules = append(c.rules, r)
			t.written++
		default:
			c.rules = slices.Insert(slices.Clip(c.rules), pos, r)
			t.written++
		}
	case "-F", "--flush":
		if len(args) == 0 {
			for _, c := range t.chains {
				t.flush(c)
			}
			return nil
		}
		c, _, err := chainArg()
		if err != nil {
			return err
		}
		t.flush(c)
	case "-N", "--new-chain":
		if len(args) == 0 {
			return errors.New("-N needs a chain")
		}
		if _, ok := t.chains[args[0]]; ok {
			return fmt.Errorf("-N %s: chain exists", args[0])
		}
		return declareChain(t, args[0]+" -")
	case "-X", "--delete-chain":
		if len(args) == 0 {
			for name, c := range t.chains {
				if !c.builtin {
					if err := deleteChain(t, name); err != nil {
						return err
					}
				}
			}
			return nil
		}
		if _, _, err := chainArg(); err != nil {
			return err
		}
		return deleteChain(t, args[0])
	case "-P", "--policy":
		c, name, err := chainArg()
		if err != nil {
			return err
		}
		if !c.builtin || len(args) < 2 {
			return fmt.Errorf("-P %s: needs a built-in chain and a policy", name)
		}
		return setPolicy(c, name, args[1])
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	return nil
}

func deleteChain(t *table, name string) error {
	c := t.chains[name]
	switch {
	case c.builtin:
		return fmt.Errorf("-X %s: cannot delete a built-in chain", name)
	case len(c.rules) > 0:
		return fmt.Errorf("-X %s: chain is not empty", name)
	}
	if by := t.referrer(name, name); by != "" {
		return fmt.Errorf("-X %s: chain is referenced from %s", name, by)
	}
	delete(t.chains, name)
	return nil
}

// parseRule checks a rule's references and returns it in save form.
func (k *Kernel) parseRule(f dataplane.Family, t *table, spec []string) (rule, error) {
	var r rule
	for i := 0; i < len(spec); i++ {
		switch spec[i] {
		case "-j", "--jump", "-g", "--goto":
			if i+1 == len(spec) {
				return r, fmt.Errorf("%s needs a target", spec[i])
			}
			r.jump = spec[i+1]
			if c, ok := t.chains[r.jump]; !(targets[r.jump] || ok && !c.builtin) {
				return r, fmt.Errorf("unknown target or chain %q", r.jump)
			}
		case "--match-set":
			if i+1 == len(spec) {
				return r, errors.New("--match-set needs a set")
			}
			name := spec[i+1]
			s, ok := k.sets[name]
			if !ok {
				return r, fmt.Errorf("set %q does not exist", name)
			}
			if s.spec.Family != "" && s.spec.Family != f {
				return r, fmt.Errorf("set %q is of family %s", name, s.spec.Family)
			}
			r.sets = append(r.sets, name)
		}
	}
	r.text = dataplane.FormatRule(dataplane.CanonicalRule(f, spec))
	r.probe = compileProbeRule(spec)
	return r, nil
}

// Save returns iptables-save output for one table: built-in chains in the
// kernel's order, then user chains by name, then each chain's rules in the
// same order.
func (k *Kernel) Save(f dataplane.Family, tableName string) ([]byte, error) {
	k.lock()
	defer k.unlock()
	t := k.tables[f][tableName]
	n := 0
	if t != nil {
		for _, c := range t.chains {
			n += len(c.rules)
		}
	}
	k.read(dataplane.OpIPTablesSave, n)
	if k.faulty(dataplane.OpIPTablesSave) {
		if err := k.fault(dataplane.OpIPTablesSave, string(f)+" "+tableName); err != nil {
			return nil, errorf(err, "iptables-save %s %s", f, tableName)
		}
	}
	if t == nil {
		return nil, errorf(syscall.EINVAL, "iptables-save %s: unknown table %q", f, tableName)
	}
	names := slices.Clone(builtinChains[tableName])
	var user []string
	for name, c := range t.chains {
		if !c.builtin {
			user = append(user, name)
		}
	}
	slices.Sort(user)
	names = append(names, user...)
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Generated by kpsim sim\n*%s\n", tableName)
	for _, name := range names {
		fmt.Fprintf(&b, ":%s %s [0:0]\n", name, t.chains[name].policy)
	}
	for _, name := range names {
		for _, r := range t.chains[name].rules {
			fmt.Fprintf(&b, "-A %s %s\n", name, r.text)
		}
	}
	b.WriteString("COMMIT\n# Completed by kpsim sim\n")
	return b.Bytes(), nil
}
