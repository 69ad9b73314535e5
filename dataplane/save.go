package dataplane

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// iptables-restore takes a rule in many spellings and iptables-save prints
// one: generic options first, addresses with their prefix length, implicit
// protocol matches named, marks as --set-xmark in short hexadecimal, a bare
// REJECT with its default reply, and so on. CanonicalRule turns any spelling
// into the printed one, so that a rule the proxier writes and the same rule
// read back from a kernel compare equal. It is the one normaliser of rule
// text: the in-memory kernel stores rules in this form (so its Save prints
// what the kernel prints), the proxier compares its payload with the
// kernel's rules through it, and state dumps are written in it. Every
// rewrite was found by restoring the spelling on a kernel and saving it
// back, with iptables 1.8.9 legacy and nft alike; the conformance suite
// (dataplane/conformance) holds each one against the kernels it runs on.

// genericOptions are the options iptables-save prints first, in this order,
// whatever order the rule was written in; long forms are printed short.
var genericOptions = map[string]string{
	"-s": "-s", "--source": "-s", "--src": "-s",
	"-d": "-d", "--destination": "-d", "--dst": "-d",
	"-i": "-i", "--in-interface": "-i",
	"-o": "-o", "--out-interface": "-o",
	"-p": "-p", "--protocol": "-p",
}

var genericOrder = []string{"-s", "-d", "-i", "-o", "-p"}

// protocolNumbers are the protocols iptables-save names when given by number.
var protocolNumbers = map[string]string{"6": "tcp", "17": "udp", "132": "sctp"}

// option is one option of a match or target as written: its name, whether
// a "!" preceded it, and its arguments.
type option struct {
	neg  bool
	name string
	args []string
}

// module describes the options of a match or target extension: how many
// arguments each takes, under every name it has, and the order
// iptables-save prints them in (options not listed keep their place after
// the listed ones).
type module struct {
	args    map[string]int
	aliases map[string]string
	order   []string
	// canonical rewrites the options once they are in print order.
	canonical func(f Family, opts []option) []option
}

func (m *module) arity(name string) (int, bool) {
	if a, ok := m.aliases[name]; ok {
		name = a
	}
	n, ok := m.args[name]
	return n, ok
}

// portModule is tcp, udp or sctp: source port, then destination port.
func portModule(extra map[string]int, order ...string) *module {
	m := &module{
		args:      map[string]int{"--sport": 1, "--dport": 1},
		aliases:   map[string]string{"--source-port": "--sport", "--destination-port": "--dport"},
		order:     append([]string{"--sport", "--dport"}, order...),
		canonical: canonicalSyn,
	}
	for k, v := range extra {
		m.args[k] = v
	}
	return m
}

var matches = map[string]*module{
	"comment":  {args: map[string]int{"--comment": 1}},
	"set":      {args: map[string]int{"--match-set": 2, "--return-nomatch": 0, "--update-counters": 0, "--update-subcounters": 0}},
	"addrtype": {args: map[string]int{"--src-type": 1, "--dst-type": 1, "--limit-iface-in": 0, "--limit-iface-out": 0}, order: []string{"--src-type", "--dst-type"}},
	"physdev":  {args: map[string]int{"--physdev-in": 1, "--physdev-out": 1, "--physdev-is-in": 0, "--physdev-is-out": 0, "--physdev-is-bridged": 0}},
	"mark":     {args: map[string]int{"--mark": 1}, canonical: canonicalMarkMatch},
	"conntrack": {args: map[string]int{"--ctstate": 1, "--ctproto": 1, "--ctorigsrc": 1, "--ctorigdst": 1, "--ctreplsrc": 1,
		"--ctrepldst": 1, "--ctstatus": 1, "--ctexpire": 1, "--ctdir": 1}, canonical: canonicalCtState},
	"state":     {args: map[string]int{"--state": 1}},
	"multiport": {args: map[string]int{"--sports": 1, "--dports": 1, "--ports": 1}},
	"tcp":       portModule(map[string]int{"--tcp-flags": 2, "--syn": 0, "--tcp-option": 1}, "--tcp-option", "--tcp-flags", "--syn"),
	"udp":       portModule(nil),
	"sctp":      portModule(map[string]int{"--chunk-types": 2}, "--chunk-types"),
	"recent": {args: map[string]int{"--set": 0, "--rcheck": 0, "--update": 0, "--remove": 0, "--seconds": 1, "--reap": 0, "--hitcount": 1,
		"--rttl": 0, "--name": 1, "--mask": 1, "--rsource": 0, "--rdest": 0},
		order: []string{"--set", "--rcheck", "--update", "--remove", "--seconds", "--reap", "--hitcount", "--rttl", "--name", "--mask", "--rsource", "--rdest"}},
	"statistic": {args: map[string]int{"--mode": 1, "--probability": 1, "--every": 1, "--packet": 1},
		order: []string{"--mode", "--probability", "--every", "--packet"}, canonical: canonicalStatistic},
	// The ipvs match prints the protocol by number and leaves a host
	// address's prefix length out.
	"ipvs": {args: map[string]int{"--ipvs": 0, "--vproto": 1, "--vaddr": 1, "--vport": 1, "--vdir": 1, "--vmethod": 1, "--vportctl": 1},
		order: []string{"--ipvs", "--vproto", "--vaddr", "--vport", "--vportctl", "--vdir", "--vmethod"}, canonical: canonicalIPVS},
}

// canonicalStatistic prints --probability as the kernel keeps it: a 31-bit
// fraction (xt_statistic), printed back with 11 decimals (0.3333333333
// reads 0.33333333349).
func canonicalStatistic(_ Family, opts []option) []option {
	for i, o := range opts {
		if o.name != "--probability" || len(o.args) != 1 {
			continue
		}
		p, err := strconv.ParseFloat(o.args[0], 64)
		if err != nil || p < 0 || p > 1 {
			continue
		}
		kept := math.Round(p * 0x80000000)
		opts[i].args = []string{strconv.FormatFloat(kept/0x80000000, 'f', 11, 64)}
	}
	return opts
}

var targetModules = map[string]*module{
	"MARK":       {args: map[string]int{"--set-mark": 1, "--set-xmark": 1, "--or-mark": 1, "--xor-mark": 1, "--and-mark": 1}, canonical: canonicalMarkTarget},
	"REJECT":     {args: map[string]int{"--reject-with": 1}, canonical: canonicalReject},
	"MASQUERADE": {args: map[string]int{"--to-ports": 1, "--random": 0, "--random-fully": 0}},
}

// CanonicalRule returns a rule's words (what follows "-A CHAIN", unquoted,
// as SplitRule gives them) as iptables-save prints the rule once a kernel of
// family f holds it. Words it does not understand are kept as written.
func CanonicalRule(f Family, words []string) []string {
	generic := map[string][]string{}
	var rest []string
	for i := 0; i < len(words); i++ {
		opt, ok := genericOptions[words[i]]
		if !ok || i+1 >= len(words) {
			rest = append(rest, words[i])
			continue
		}
		g := []string{opt, canonicalGeneric(f, opt, words[i+1])}
		if n := len(rest); n > 0 && rest[n-1] == "!" {
			rest = rest[:n-1]
			g = append([]string{"!"}, g...)
		}
		generic[opt] = g
		i++
	}
	out := make([]string, 0, len(words)+4)
	for _, o := range genericOrder {
		out = append(out, generic[o]...)
	}
	proto := ""
	if g := generic["-p"]; len(g) > 0 && g[0] != "!" {
		proto = g[len(g)-1]
	}
	return append(out, canonicalExtensions(f, proto, rest)...)
}

func canonicalGeneric(f Family, opt, v string) string {
	switch opt {
	case "-p":
		v = strings.ToLower(v)
		if name, ok := protocolNumbers[v]; ok {
			return name
		}
		return v
	case "-s", "-d":
		return canonicalAddress(f, v, true)
	}
	return v
}

// canonicalAddress prints an address or network the way iptables does:
// masked, with its prefix length (omitted for a host when hostBits is false).
func canonicalAddress(f Family, v string, hostBits bool) string {
	p, err := netip.ParsePrefix(v)
	if err != nil {
		a, aerr := netip.ParseAddr(v)
		if aerr != nil {
			return v // a name, or several addresses: left to the kernel
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if f == IPv4 && p.Addr().Is4In6() {
		return v
	}
	p = p.Masked()
	if !hostBits && p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// segment is one extension of a rule: a match ("-m NAME") or the target
// ("-j NAME", "-g CHAIN") with its options.
type segment struct {
	head []string // "-m", "tcp" / "-j", "MARK"
	mod  *module  // nil: options kept as written
	opts []option
	raw  []string // the words of an extension kpsim does not know
}

// canonicalExtensions orders and rewrites the matches and the target.
// Matches keep the order they were written in; the target comes last; an
// option of the rule's protocol that no loaded match takes loads the
// protocol's match where it appears, as iptables does.
func canonicalExtensions(f Family, proto string, words []string) []string {
	var segs []*segment
	var target *segment
	var cur *segment
	loaded := map[string]bool{}
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch w {
		case "-m", "--match", "-j", "--jump", "-g", "--goto":
			if i+1 >= len(words) {
				segs = append(segs, &segment{raw: words[i:]})
				i = len(words)
				continue
			}
			name := words[i+1]
			i++
			s := &segment{}
			switch w {
			case "-m", "--match":
				s.head = []string{"-m", name}
				s.mod = matches[name]
				loaded[name] = true
				segs = append(segs, s)
			case "-j", "--jump":
				s.head = []string{"-j", name}
				s.mod = targetModules[name]
				target = s
			default:
				s.head = []string{"-g", name}
				target = s
			}
			cur = s
			continue
		}
		neg := false
		if w == "!" && i+1 < len(words) {
			neg, w = true, words[i+1]
			i++
		}
		// An option the current extension takes, or else a match loaded
		// before it (options are not bound to the -m they follow).
		if owner := optionOwner(cur, segs, w); owner != nil {
			if n, _ := owner.mod.arity(w); i+n < len(words) {
				owner.opts = append(owner.opts, option{neg, w, words[i+1 : i+1+n]})
				i += n
				continue
			}
		}
		// An option of the rule's protocol, before its match was named.
		if pm := matches[proto]; pm != nil && (proto == "tcp" || proto == "udp" || proto == "sctp") && !loaded[proto] {
			if n, ok := pm.arity(w); ok && i+n < len(words) {
				s := &segment{head: []string{"-m", proto}, mod: pm}
				loaded[proto] = true
				segs = append(segs, s)
				cur = s
				cur.opts = append(cur.opts, option{neg, w, words[i+1 : i+1+n]})
				i += n
				continue
			}
		}
		// Anything else stays as written, where it was written.
		if neg {
			w = "! " + w
		}
		if cur == nil {
			cur = &segment{}
			segs = append(segs, cur)
		}
		if cur.mod != nil {
			cur.opts = append(cur.opts, option{name: w})
		} else {
			cur.raw = append(cur.raw, strings.SplitN(w, " ", 2)...)
		}
	}
	if target != nil {
		segs = append(segs, target)
	}
	var out []string
	for _, s := range segs {
		out = append(out, s.head...)
		if s.mod == nil {
			out = append(out, s.raw...)
			continue
		}
		opts := s.opts
		for i := range opts {
			if a, ok := s.mod.aliases[opts[i].name]; ok {
				opts[i].name = a
			}
		}
		opts = printOrder(s.mod.order, opts)
		if s.mod.canonical != nil {
			opts = s.mod.canonical(f, opts)
		}
		for _, o := range opts {
			if o.neg {
				out = append(out, "!")
			}
			out = append(out, strings.SplitN(o.name, " ", 2)...)
			out = append(out, o.args...)
		}
	}
	if target != nil && target.head[1] == "REJECT" && len(target.opts) == 0 {
		out = append(out, "--reject-with", rejectDefault(f))
	}
	return out
}

// optionOwner is the extension that takes option name: the current one,
// or the latest match loaded before it that does; nil if none.
func optionOwner(cur *segment, segs []*segment, name string) *segment {
	if cur != nil && cur.mod != nil {
		if _, ok := cur.mod.arity(name); ok {
			return cur
		}
	}
	for i := len(segs) - 1; i >= 0; i-- {
		if s := segs[i]; s != cur && s.mod != nil && s.head != nil && s.head[0] == "-m" {
			if _, ok := s.mod.arity(name); ok {
				return s
			}
		}
	}
	return nil
}

// printOrder sorts options into the order an extension prints them,
// keeping unlisted ones, in their order, after the listed ones.
func printOrder(order []string, opts []option) []option {
	if len(order) == 0 {
		return opts
	}
	rank := func(o option) int {
		if i := slices.Index(order, o.name); i >= 0 {
			return i
		}
		return len(order)
	}
	out := slices.Clone(opts)
	slices.SortStableFunc(out, func(a, b option) int { return rank(a) - rank(b) })
	return out
}

// canonicalSyn: --syn is printed as the flags test it stands for.
func canonicalSyn(_ Family, opts []option) []option {
	for i, o := range opts {
		if o.name == "--syn" {
			opts[i] = option{neg: o.neg, name: "--tcp-flags", args: []string{"FIN,SYN,RST,ACK", "SYN"}}
		}
	}
	return opts
}

// hexMark prints a mark or a mask as iptables does: 0x00004000 -> 0x4000.
func hexMark(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }

// parseMark reads "VALUE[/MASK]"; mask is 0xffffffff when absent.
func parseMark(s string) (value, mask uint64, ok bool) {
	v, m, hasMask := strings.Cut(s, "/")
	value, err := strconv.ParseUint(v, 0, 32)
	if err != nil {
		return 0, 0, false
	}
	mask = 0xffffffff
	if hasMask {
		if mask, err = strconv.ParseUint(m, 0, 32); err != nil {
			return 0, 0, false
		}
	}
	return value, mask, true
}

// canonicalMarkMatch: --mark VALUE[/MASK], the mask left out when it is all ones.
func canonicalMarkMatch(_ Family, opts []option) []option {
	for i, o := range opts {
		if o.name != "--mark" || len(o.args) != 1 {
			continue
		}
		v, m, ok := parseMark(o.args[0])
		if !ok {
			continue
		}
		s := hexMark(v)
		if m != 0xffffffff {
			s += "/" + hexMark(m)
		}
		opts[i].args = []string{s}
	}
	return opts
}

// canonicalMarkTarget: every way of setting a mark is printed as the
// --set-xmark VALUE/MASK it compiles to.
func canonicalMarkTarget(_ Family, opts []option) []option {
	for i, o := range opts {
		if len(o.args) != 1 {
			continue
		}
		v, m, ok := parseMark(o.args[0])
		if !ok {
			continue
		}
		switch o.name {
		case "--set-xmark", "--set-mark":
		case "--or-mark":
			m = v
		case "--xor-mark":
			m = 0
		case "--and-mark":
			v, m = 0, ^v&0xffffffff
		default:
			continue
		}
		opts[i] = option{name: "--set-xmark", args: []string{hexMark(v) + "/" + hexMark(m)}}
	}
	return opts
}

// ctStates is the order iptables-save lists connection states in.
var ctStates = []string{"INVALID", "NEW", "RELATED", "ESTABLISHED", "UNTRACKED", "SNAT", "DNAT"}

func canonicalCtState(_ Family, opts []option) []option {
	for i, o := range opts {
		if o.name != "--ctstate" || len(o.args) != 1 {
			continue
		}
		states := strings.Split(strings.ToUpper(o.args[0]), ",")
		slices.SortFunc(states, func(a, b string) int {
			ia, ib := slices.Index(ctStates, a), slices.Index(ctStates, b)
			if ia < 0 || ib < 0 {
				return strings.Compare(a, b)
			}
			return ia - ib
		})
		opts[i].args = []string{strings.Join(slices.Compact(states), ",")}
	}
	return opts
}

var ipProtocolNumbers = map[string]string{"tcp": "6", "udp": "17", "sctp": "132", "icmp": "1", "icmpv6": "58"}

func canonicalIPVS(f Family, opts []option) []option {
	for i, o := range opts {
		if len(o.args) != 1 {
			continue
		}
		switch o.name {
		case "--vproto":
			if n, ok := ipProtocolNumbers[strings.ToLower(o.args[0])]; ok {
				opts[i].args = []string{n}
			}
		case "--vaddr":
			opts[i].args = []string{canonicalAddress(f, o.args[0], false)}
		}
	}
	return opts
}

// rejectAliases are the --reject-with spellings iptables-save prints otherwise.
var rejectAliases = map[string]string{"tcp-rst": "tcp-reset"}

func rejectDefault(f Family) string {
	if f == IPv6 {
		return "icmp6-port-unreachable"
	}
	return "icmp-port-unreachable"
}

func canonicalReject(_ Family, opts []option) []option {
	for i, o := range opts {
		if o.name == "--reject-with" && len(o.args) == 1 {
			if a, ok := rejectAliases[o.args[0]]; ok {
				opts[i].args = []string{a}
			}
		}
	}
	return opts
}

// quotedOptions take free text, which iptables-save quotes unless it is a
// single word of letters, digits, '_' and '-' (xtables_save_string).
var quotedOptions = map[string]bool{"--comment": true, "--log-prefix": true, "--nflog-prefix": true}

// FormatRule prints canonical words as iptables-save does, free text
// quoted as it quotes it; SplitRule reads the result back into the words.
func FormatRule(words []string) string {
	var b strings.Builder
	for i, w := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		if i > 0 && quotedOptions[words[i-1]] && !plainWord(w) || strings.ContainsAny(w, " \t\"'\\") || w == "" {
			b.WriteByte('"')
			for _, c := range []byte(w) {
				if c == '"' || c == '\\' || c == '\'' {
					b.WriteByte('\\')
				}
				b.WriteByte(c)
			}
			b.WriteByte('"')
			continue
		}
		b.WriteString(w)
	}
	return b.String()
}

func plainWord(w string) bool {
	if w == "" {
		return false
	}
	for _, c := range w {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// CanonicalRuleText is CanonicalRule on a rule's text (what follows
// "-A CHAIN"), printed by FormatRule.
func CanonicalRuleText(f Family, rule string) (string, error) {
	words, err := SplitRule(rule)
	if err != nil {
		return "", fmt.Errorf("rule %q: %w", rule, err)
	}
	return FormatRule(CanonicalRule(f, words)), nil
}

// Table is one table of iptables-save (or iptables-restore) text: the
// chains it declares with their policies ("-" for a chain of one's own) and
// each chain's rules, in order, in canonical form (after "-A CHAIN ").
type Table struct {
	Chains map[string]string
	Rules  map[string][]string
}

// ReadTable reads one table of family f back from ipt (a Save) and parses
// it; a table ipt does not print is an empty one. It is what an iptables
// command that looks before it writes reads.
func ReadTable(ipt IPTables, f Family, name string) (*Table, error) {
	text, err := ipt.Save(f, name)
	if err != nil {
		return nil, err
	}
	tables, err := ParseSave(f, text)
	if err != nil {
		return nil, err
	}
	if t := tables[name]; t != nil {
		return t, nil
	}
	return &Table{Chains: map[string]string{}, Rules: map[string][]string{}}, nil
}

// ParseSave reads iptables-save output, or an iptables-restore payload
// (whose "-A" lines it reads; "-I" and the other commands are not rules of
// a saved table), of family f into its tables, keyed by name. Comments,
// counters and COMMIT lines carry nothing it keeps.
func ParseSave(f Family, text []byte) (map[string]*Table, error) {
	tables := map[string]*Table{}
	var cur *Table
	for n, line := range strings.Split(string(text), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line == "COMMIT" {
			continue
		}
		if line[0] == '[' { // iptables-save -c: "[packets:bytes] -A ..."
			if i := strings.IndexByte(line, ']'); i >= 0 {
				line = strings.TrimSpace(line[i+1:])
			}
		}
		if line[0] == '*' {
			name := strings.TrimSpace(line[1:])
			if tables[name] == nil {
				tables[name] = &Table{Chains: map[string]string{}, Rules: map[string][]string{}}
			}
			cur = tables[name]
			continue
		}
		if cur == nil {
			return nil, fmt.Errorf("line %d: %q outside a table", n+1, line)
		}
		if line[0] == ':' {
			fields := strings.Fields(line[1:])
			if len(fields) < 2 {
				return nil, fmt.Errorf("line %d: chain declaration %q", n+1, line)
			}
			cur.Chains[fields[0]] = fields[1]
			continue
		}
		words, err := SplitRule(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		if len(words) < 2 || words[0] != "-A" {
			continue
		}
		cur.Rules[words[1]] = append(cur.Rules[words[1]], FormatRule(CanonicalRule(f, words[2:])))
	}
	return tables, nil
}
