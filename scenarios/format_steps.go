package scenarios

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
	"github.com/kpsim/kpsim/results"
)

// Step is one timeline entry: exactly one of the fields is set. In YAML a
// step is a one-key mapping (`- sleep: 2s`) or, for steps without
// arguments, a bare name (`- createCluster`).
//
// Each field's type is a step kind that labels, checks and runs itself
// (stepKind, action): a new step is a field here and a type with those
// methods, nothing else.
type Step struct {
	CreateCluster  *CreateCluster  `yaml:"createCluster" json:"createCluster,omitempty"`
	StartProxier   *StartProxier   `yaml:"startProxier" json:"startProxier,omitempty"`
	WaitSynced     *WaitSynced     `yaml:"waitSynced" json:"waitSynced,omitempty"`
	ChurnEndpoints *Churn          `yaml:"churnEndpoints" json:"churnEndpoints,omitempty"`
	AddServices    *AddServices    `yaml:"addServices" json:"addServices,omitempty"`
	DeleteServices *DeleteServices `yaml:"deleteServices" json:"deleteServices,omitempty"`
	RestartProxier *RestartProxier `yaml:"restartProxier" json:"restartProxier,omitempty"`
	APIFault       *APIFault       `yaml:"apiFault" json:"apiFault,omitempty"`
	KernelDrift    *KernelDrift    `yaml:"kernelDrift" json:"kernelDrift,omitempty"`
	Probes         *ProbesSwitch   `yaml:"probes" json:"probes,omitempty"`
	Sleep          *Sleep          `yaml:"sleep" json:"sleep,omitempty"`
	Mark           *Mark           `yaml:"mark" json:"mark,omitempty"`
	Repeat         *Repeat         `yaml:"repeat" json:"repeat,omitempty"`
}

// stepKind is what every kind of step does for itself: say what it is (the
// label progress and results show) and check its arguments and its place in
// the timeline.
type stepKind interface {
	label() string
	check(c *stepCheck)
}

// action is a step kind the run executes; every kind but repeat is one (a
// repeat is expanded into its steps, and results record those).
type action interface {
	stepKind
	run(x *run) error
}

// kind returns the set field's YAML key and its value.
func (s *Step) kind() (string, stepKind) {
	v := reflect.ValueOf(s).Elem()
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); !f.IsNil() {
			return v.Type().Field(i).Tag.Get("yaml"), f.Interface().(stepKind)
		}
	}
	return "", nil
}

// name is the step's YAML key.
func (s *Step) name() string {
	n, _ := s.kind()
	return n
}

// resultKind is the step's kind as results files spell it (kebab-case).
func (s *Step) resultKind() string {
	k := s.name()
	out := make([]byte, 0, len(k)+4)
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c >= 'A' && c <= 'Z' {
			out = append(out, '-', c+'a'-'A')
			continue
		}
		out = append(out, c)
	}
	return string(out)
}

// String returns the step's label for progress and results.
func (s *Step) String() string {
	_, k := s.kind()
	if k == nil {
		return ""
	}
	if l := k.label(); l != "" {
		return l
	}
	return s.resultKind()
}

func (s *Step) decodeNode(d *decoder, n *yaml.Node, path string) error {
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!str":
		// A bare step name: the same as "name:" with no value.
		m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: n.Line, Column: n.Column, Content: []*yaml.Node{
			n, {Kind: yaml.ScalarNode, Tag: "!!null", Line: n.Line, Column: n.Column},
		}}
		n = m
	case n.Kind != yaml.MappingNode:
		return d.errAt(n, path, "a step must be a step name or a one-key mapping such as \"sleep: 2s\", got %s", Describe(n))
	}
	if len(n.Content) != 2 {
		return d.errAt(n, path, "a step has exactly one kind (one key), got %d", len(n.Content)/2)
	}
	if err := d.decodeStruct(n, s, path); err != nil {
		return err
	}
	if s.name() == "" {
		return d.errAt(n, path, "empty step")
	}
	return nil
}

// stepCheck is what a step kind checks itself against.
type stepCheck struct {
	s     *Scenario
	v     *validator
	at    string // the step: timeline[3]
	args  string // its arguments: timeline[3].churnEndpoints
	st    *timelineState
	depth int // 1 at the top of the timeline, +1 per repeat
}

// errf reports a problem with the step itself (field "") or one of its arguments.
func (c *stepCheck) errf(field, format string, a ...any) {
	c.v.errf(c.path(field), format, a...)
}

// errfFrom is errf for a problem that follows from other fields' values
// too (see decoder.errFrom).
func (c *stepCheck) errfFrom(deps []string, field, format string, a ...any) {
	c.v.errfFrom(deps, c.path(field), format, a...)
}

// path is the field path of the step (field "") or one of its arguments.
func (c *stepCheck) path(field string) string {
	if field == "" {
		return c.at
	}
	return c.args + "." + field
}

// timelineState is what checking has learned from the steps before.
type timelineState struct {
	created, started, startSeen bool
	expanded                    int
}

func (s *Scenario) checkSteps(v *validator, steps []Step, path string, st *timelineState, depth int) int {
	n := 0
	if depth > 4 {
		v.errf(path, "repeats nested more than 4 deep")
		return 0
	}
	for i := range steps {
		at := fmt.Sprintf("%s[%d]", path, i)
		name, k := steps[i].kind()
		n++
		c := &stepCheck{s: s, v: v, at: at, args: at + "." + name, st: st, depth: depth}
		k.check(c)
		if r, ok := k.(*Repeat); ok {
			n += max(r.Times, 0) * s.checkSteps(v, r.Steps, c.args+".steps", st, depth+1)
			if n > maxExpandedSteps {
				return n
			}
		}
	}
	return n
}

func (x *run) runSteps(steps []Step, path string) error {
	for i := range steps {
		st := &steps[i]
		at := fmt.Sprintf("%s[%d]", path, i)
		name, k := st.kind()
		if r, ok := k.(*Repeat); ok {
			for range r.Times {
				if err := x.runSteps(r.Steps, at+".repeat.steps"); err != nil {
					return err
				}
			}
			continue
		}
		if err := x.ctx.Err(); err != nil {
			return err
		}
		rec := record.Step{Index: len(x.steps), Kind: st.resultKind(), Label: st.String(), Start: x.now()}
		if x.o.OnStep != nil {
			x.o.OnStep(StepStart{Done: rec.Index, Total: x.stepsTotal, Label: rec.Label,
				Elapsed: rec.Start.Sub(x.start), Clock: x.drv.clockName()})
		}
		if x.probes != nil {
			rec.ProbeAttempts = x.probes.attemptsSoFar()
		}
		err := k.(action).run(x)
		if err == nil {
			err = x.ctx.Err()
		}
		rec.End = x.now()
		x.steps = append(x.steps, rec)
		if err != nil {
			return fmt.Errorf("%s (%s): %w", at, name, err)
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// The kinds of step.

// CreateCluster creates the cluster's Services and EndpointSlices. Before
// the proxier starts, they are what its informers list; afterwards they
// arrive as watch events.
type CreateCluster struct {
	Rate float64 `yaml:"rate" json:"rate,omitempty"` // services per second; 0: at once
}

func (*CreateCluster) label() string { return "" }

func (a *CreateCluster) check(c *stepCheck) {
	if c.st.created || c.depth > 1 {
		c.errf("", "createCluster runs once, outside repeat")
	}
	c.st.created = true
	if a.Rate < 0 {
		c.errf("rate", "must not be negative")
	}
}

func (a *CreateCluster) run(x *run) error { return x.createCluster(a.Rate) }

// StartProxier starts the proxier.
type StartProxier struct {
	// KnownAtFirstSync is the share of the initial list (Services and
	// EndpointSlices, each kind on its own) that the new generation's
	// handlers have passed on when its first sync runs; the rest, and what
	// arrives behind it, reaches them after that sync. It matters to
	// initialSync: legacy, whose first sync takes what it has not heard of
	// for stale (the incident's first sync knew 1,636 of 4,533 services:
	// 0.36); a proxier that waits for its handlers is not affected. Exact
	// and repeatable on the modeled clock. Unset: the handlers keep up.
	KnownAtFirstSync *float64 `yaml:"knownAtFirstSync" json:"knownAtFirstSync,omitempty"`
	// SlowInitialList makes every informer event handler of the new
	// generation take this long per event, in wall time, so handlers lag
	// behind the informers' stores by however much the machine's timing
	// decides. Wall clock only: on the modeled clock, use knownAtFirstSync.
	SlowInitialList Duration `yaml:"slowInitialList" json:"slowInitialList,omitempty"`
	// Mode is the new generation's proxy mode, and the run's from then on:
	// restartProxier: {mode: nftables} switches the node from IPVS mode, as
	// kube-proxy restarted with another --proxy-mode does (the release
	// cleans up the previous mode's state as it starts). Unset: the run's.
	Mode proxier.Mode `yaml:"mode" json:"mode,omitempty"`
}

func (a *StartProxier) label() string {
	if a.Mode != "" {
		return fmt.Sprintf("start proxier (%s mode)", a.Mode)
	}
	if a.KnownAtFirstSync != nil {
		return fmt.Sprintf("start proxier (%.0f%% known at first sync)", 100**a.KnownAtFirstSync)
	}
	return ""
}

func (a *StartProxier) check(c *stepCheck) {
	if c.st.startSeen || c.depth > 1 {
		c.errf("", "startProxier runs once, outside repeat; use restartProxier to restart")
	}
	c.st.startSeen, c.st.started = true, true
	a.checkArgs(c)
}

// checkArgs checks the arguments startProxier and restartProxier share.
func (a *StartProxier) checkArgs(c *stepCheck) {
	if k := a.KnownAtFirstSync; k != nil && (*k < 0 || *k > 1) {
		c.errf("knownAtFirstSync", "must be a share between 0 and 1, got %v", *k)
	}
	if a.Mode != "" {
		cfg := c.s.Proxier
		cfg.Mode = a.Mode
		var errs proxier.ConfigErrors
		if errors.As(cfg.Defaults().Validate(), &errs) {
			for _, e := range errs {
				if e.Field == "mode" {
					c.errfFrom([]string{"proxier"}, "mode", "%s", e.Msg)
				}
			}
		}
	}
	if a.SlowInitialList > 0 && c.s.modeledClock() {
		c.errfFrom([]string{"backend", "sim.timeScale"}, "slowInitialList", "slows handlers in wall time, which a run on the modeled clock "+
			"(the sim at timeScale 0) does not see; use knownAtFirstSync to say what the first sync knows")
	}
}

func (a *StartProxier) run(x *run) error { return x.startProxier(a) }

// RestartProxier kills the proxier and starts a new generation on the same
// kernel, as StartProxier starts the first.
type RestartProxier StartProxier

func (a *RestartProxier) label() string {
	switch {
	case a.Mode != "":
		return fmt.Sprintf("restart proxier in %s mode", a.Mode)
	case a.KnownAtFirstSync != nil:
		return fmt.Sprintf("restart proxier (%.0f%% known at first sync)", 100**a.KnownAtFirstSync)
	case a.SlowInitialList > 0:
		return fmt.Sprintf("restart proxier (handlers %s/event)", a.SlowInitialList)
	}
	return ""
}

func (a *RestartProxier) check(c *stepCheck) {
	if !c.st.started {
		c.errf("", "restartProxier before startProxier")
	}
	(*StartProxier)(a).checkArgs(c)
}

func (a *RestartProxier) run(x *run) error {
	x.stopProxier()
	return x.startProxier((*StartProxier)(a))
}

// WaitSynced waits until every family's proxier has synced the API's
// current state, or fails at Timeout. On the modeled clock the wait then
// lasts until Timeout even when a sync's operation would end past it, and
// the run's end records that sync as stopped there.
type WaitSynced struct {
	Timeout Duration `yaml:"timeout" json:"timeout"`
}

func (*WaitSynced) label() string { return "" }

func (a *WaitSynced) check(c *stepCheck) {
	if !c.st.started {
		c.errf("", "waitSynced before startProxier: nothing would sync")
	}
	if a.Timeout <= 0 {
		c.errf("timeout", "must be > 0 (leave it out for the default, %s)", Duration(defaultWaitTimeout))
	}
}

func (a *WaitSynced) run(x *run) error { return x.waitSynced(a.Timeout.D()) }

// Churn is a rolling restart of a set of services' endpoints: on each
// visit to a service, its terminating endpoint goes away, its oldest ready
// endpoint becomes terminating and a new ready endpoint appears.
type Churn struct {
	// Rate is service visits per second; a visit updates each of the
	// service's EndpointSlices once.
	Rate     float64  `yaml:"rate" json:"rate"`
	Duration Duration `yaml:"duration" json:"duration"`
	// Share of the cluster's services churned (drawn from the seed), or
	// Services: a count drawn from the seed or names, not both.
	Share    float64  `yaml:"share" json:"share,omitempty"`
	Services Selector `yaml:"services" json:"services,omitempty"`
}

func (a *Churn) label() string {
	return fmt.Sprintf("churn endpoints %.4g/s for %s", a.Rate, a.Duration)
}

func (a *Churn) check(c *stepCheck) {
	if !c.st.created {
		c.errf("", "churnEndpoints before createCluster")
	}
	if a.Rate <= 0 {
		c.errf("rate", "must be > 0")
	}
	if a.Duration <= 0 {
		c.errf("duration", "must be > 0")
	}
	switch {
	case a.Share != 0 && !a.Services.Empty():
		c.v.errf(c.args, "give share or services, not both")
	case a.Share == 0 && a.Services.Empty():
		c.v.errf(c.args, "give share (of the cluster's services) or services (a count or names)")
	}
	if a.Share < 0 || a.Share > 1 {
		c.errf("share", "must be a share between 0 and 1, got %v", a.Share)
	}
	if len(a.Services.Names) > 0 && a.Services.Count > 0 {
		// The run visits the named services alone (replay.pick): a count
		// beside them, as probes.services takes one, would be ignored.
		c.errf("services", "give names or a count, not both (a count draws that many services from the seed)")
	}
	validateSelector(c.v, c.args+".services", a.Services, memoryMaxServices)
}

func (a *Churn) run(x *run) error { return x.churnEndpoints(a) }

// ServiceRate is Count services at Rate per second (0: at once).
type ServiceRate struct {
	Count int     `yaml:"count" json:"count"`
	Rate  float64 `yaml:"rate" json:"rate,omitempty"`
}

func (a *ServiceRate) check(c *stepCheck) {
	c.v.intRange(c.args+".count", a.Count, 1, memoryMaxServices)
	if a.Rate < 0 {
		c.errf("rate", "must not be negative")
	}
}

// AddServices generates new services from the cluster's pools.
type AddServices ServiceRate

func (a *AddServices) label() string      { return "add " + nServices(a.Count) }
func (a *AddServices) check(c *stepCheck) { (*ServiceRate)(a).check(c) }

func (a *AddServices) run(x *run) error {
	return x.pace(a.Rate, 0, a.Count, func(int) error {
		svc, eps, err := x.s.gen.service()
		if err != nil {
			return err
		}
		return x.r.createService(svc, eps)
	})
}

// DeleteServices deletes live services drawn from the seed, never a probed one.
type DeleteServices ServiceRate

func (a *DeleteServices) label() string      { return "delete " + nServices(a.Count) }
func (a *DeleteServices) check(c *stepCheck) { (*ServiceRate)(a).check(c) }

func (a *DeleteServices) run(x *run) error {
	keys, err := x.r.pick(Selector{Count: a.Count}, 0, x.probes.services())
	if err != nil {
		return err
	}
	return x.pace(a.Rate, 0, len(keys), func(i int) error { return x.r.deleteService(keys[i]) })
}

// APIFault changes how the fake API delivers watch events from now on.
type APIFault struct {
	// WatchDelay delays every watch event by this much (0 restores prompt delivery).
	WatchDelay Duration `yaml:"watchDelay" json:"watchDelay"`
	// DropWatch ends every open watch with "resource version too old",
	// which makes the informers relist.
	DropWatch bool `yaml:"dropWatch" json:"dropWatch,omitempty"`
}

func (a *APIFault) label() string {
	return fmt.Sprintf("api fault (watch delay %s, drop %v)", a.WatchDelay, a.DropWatch)
}

func (a *APIFault) check(c *stepCheck) {
	if a.WatchDelay.D() > maxWatchDelay {
		c.errf("watchDelay", "at most %s", maxWatchDelay)
	}
}

func (a *APIFault) run(x *run) error {
	x.r.hub.setDelay(a.WatchDelay.D())
	if a.DropWatch {
		x.r.hub.dropAll()
	}
	return nil
}

// KernelDrift changes the kernel behind the proxier's back, as an admin or
// another agent on the node would: it deletes the ClusterIP virtual servers
// (delete: virtualServers) or the KUBE-CLUSTER-IP entries (delete:
// clusterIPEntries) of Services services, the probed ones first, then
// others drawn from the seed, every port and family. A proxier repairs the
// kernel only when it next reads it back: kpsim's at its periodic full sync
// (syncPeriod), kube-proxy's IPVS mode at any sync, and with no change to
// the cluster at its periodic one. The probes' windows after this step are
// the repair time.
type KernelDrift struct {
	Services int    `yaml:"services" json:"services"`
	Delete   string `yaml:"delete" json:"delete"`
}

// What a kernelDrift step can delete.
const (
	driftVirtualServers   = "virtualServers"
	driftClusterIPEntries = "clusterIPEntries"
)

func (a *KernelDrift) label() string {
	return fmt.Sprintf("kernel drift: delete the %s of %s", a.Delete, nServices(a.Services))
}

func (a *KernelDrift) check(c *stepCheck) {
	c.v.intRange(c.args+".services", a.Services, 1, memoryMaxServices)
	c.v.oneOf(c.args+".delete", a.Delete, []string{driftVirtualServers, driftClusterIPEntries})
	if !c.st.created {
		c.errf("", "kernelDrift before createCluster: there is nothing to delete yet")
	}
}

func (a *KernelDrift) run(x *run) error {
	keys := slices.Compact(x.probes.services())
	if len(keys) < a.Services {
		more, err := x.r.pick(Selector{Count: a.Services - len(keys)}, 0, keys)
		if err != nil {
			return err
		}
		keys = append(keys, more...)
	}
	keys = keys[:min(len(keys), a.Services)]
	var changes []dataplane.SetChange
	for _, k := range keys {
		ls := x.r.service(k)
		if ls == nil {
			continue // deleted meanwhile
		}
		svc, err := x.r.currentService(ls)
		if err != nil {
			return err
		}
		for _, ip := range svc.Spec.ClusterIPs {
			addr, err := netip.ParseAddr(ip)
			if err != nil || !slices.Contains(x.fams, dataplane.FamilyOf(addr)) {
				continue
			}
			for _, p := range svc.Spec.Ports {
				proto := dataplane.Protocol(p.Protocol)
				key := dataplane.ServiceKey{Address: addr, Port: uint16(p.Port), Protocol: proto}
				switch a.Delete {
				case driftVirtualServers:
					if err := x.dp.IPVS.DeleteService(key); err != nil && !errors.Is(err, fs.ErrNotExist) {
						return fmt.Errorf("delete virtual server %s: %w", key, err)
					}
				case driftClusterIPEntries:
					changes = append(changes, dataplane.SetChange{
						Set: proxier.SetName("KUBE-CLUSTER-IP", dataplane.FamilyOf(addr)),
						Del: []string{addr.String() + "," + proto.SetProto() + ":" + strconv.Itoa(int(p.Port))},
					})
				}
			}
		}
	}
	if len(changes) > 0 {
		if err := x.dp.IPSet.Apply(changes); err != nil {
			return fmt.Errorf("delete KUBE-CLUSTER-IP entries: %w", err)
		}
	}
	return nil
}

// ProbesSwitch turns probing on or off; YAML accepts on/off and true/false.
type ProbesSwitch Switch

func (a ProbesSwitch) MarshalJSON() ([]byte, error) { return Switch(a).MarshalJSON() }

func (a *ProbesSwitch) decodeNode(d *decoder, n *yaml.Node, path string) error {
	return (*Switch)(a).decodeNode(d, n, path)
}

func (a *ProbesSwitch) label() string {
	if *a {
		return "probes on"
	}
	return "probes off"
}

func (a *ProbesSwitch) check(c *stepCheck) {
	if !*a {
		return
	}
	if c.s.Probes.Services.Empty() {
		c.errf("", "probes on, but probes.services selects nothing to probe")
	}
	if !c.st.created {
		c.errf("", "probes on before createCluster: there is nothing to probe yet")
	}
}

func (a *ProbesSwitch) run(x *run) error {
	if !*a {
		x.drv.probesOff()
		return nil
	}
	x.drv.probesOn(x.ctx, x.probes)
	return x.drv.until(x.ctx, x.now()) // the first round, now
}

// Sleep lets time pass.
type Sleep Duration

func (a Sleep) MarshalJSON() ([]byte, error) { return Duration(a).MarshalJSON() }

func (a *Sleep) decodeNode(d *decoder, n *yaml.Node, path string) error {
	return (*Duration)(a).decodeNode(d, n, path)
}

func (a *Sleep) label() string { return "sleep " + Duration(*a).String() }

func (a *Sleep) check(c *stepCheck) {
	if *a <= 0 {
		c.v.errf(c.args, "must be > 0")
	}
}

func (a *Sleep) run(x *run) error { return x.drv.until(x.ctx, x.now().Add(Duration(*a).D())) }

// Mark opens a segment of the timeline named by it (`- mark: churn`):
// the summary, reports, comparisons and sweeps give figures for each
// segment, and a scenario's question can name it. It does nothing else.
type Mark string

func (a *Mark) decodeNode(d *decoder, n *yaml.Node, path string) error {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return d.errAt(n, path, "want a segment name, such as \"mark: churn\", got %s", Describe(n))
	}
	*a = Mark(n.Value)
	return nil
}

func (a *Mark) label() string { return string(*a) }

func (a *Mark) check(c *stepCheck) {
	switch name := string(*a); {
	case name == "":
		c.v.errf(c.args, "want a segment name")
	case name == results.FirstSegment || strings.ContainsAny(name, " /"):
		c.v.errf(c.args, "%q: want a name other than %q, without spaces or slashes (it prefixes figure names: %s/sync)", name, results.FirstSegment, name)
	}
}

func (a *Mark) run(*run) error { return nil }

// Repeat runs Steps Times times.
type Repeat struct {
	Times int    `yaml:"times" json:"times"`
	Steps []Step `yaml:"steps" json:"steps"`
}

func (a *Repeat) label() string {
	return fmt.Sprintf("repeat %d %s", a.Times, results.Plural(a.Times, "time", "times"))
}

// check checks the repeat itself; checkSteps checks its steps.
func (a *Repeat) check(c *stepCheck) {
	c.v.intRange(c.args+".times", a.Times, 1, maxRepeatTimes)
	if len(a.Steps) == 0 {
		c.errf("steps", "required: at least one step")
	}
}
