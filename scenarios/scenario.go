// Package scenarios loads, validates and replays kpsim scenarios: a cluster,
// a proxier configuration, a backend and a timeline of API changes, proxier
// restarts and faults. The replay drives a client-go fake clientset that the
// proxier's informers watch, and measures every sync, kernel operation and
// probe into a results file.
//
// The files say which part they are: scenario.go and format_*.go are the
// scenario format (its types, decoding, --set overrides, validation, the
// timeline's steps, the shipped files); cluster*.go the generator of a
// scenario's cluster (its address pools and per-service counts);
// replay*.go the replay (a run, the API store and watches behind the fake
// clientset, the handlers' lag, probes, and replay_clock.go and
// replay_driver.go, the modeled clock and the wall clock it moves on);
// state.go a node programmed once from a cluster export (kpsim state).
package scenarios

import (
	"encoding/json"
	"time"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kpsim/kpsim/dataplane"
	"github.com/kpsim/kpsim/objects"
	"github.com/kpsim/kpsim/proxier"
	"github.com/kpsim/kpsim/record"
)

// Scenario is one scenario file. Field names are the YAML keys; the JSON form
// (the same names) is what a results file records as "the scenario as run".
type Scenario struct {
	Name string `yaml:"name" json:"name"`
	// Description is the question the scenario answers, in a sentence or two.
	Description string `yaml:"description" json:"description"`
	// Question names the segment of the timeline the scenario asks about
	// (results.Segments: "restart" after a restartProxier step, a mark's
	// name, ...): the summary, reports, comparisons and sweeps lead with
	// its figures. Empty: the whole run.
	Question string  `yaml:"question" json:"question,omitempty"`
	Seed     int64   `yaml:"seed" json:"seed"`
	Backend  string  `yaml:"backend" json:"backend"` // sim (default) or kernel
	Sim      Sim     `yaml:"sim" json:"sim"`
	Cluster  Cluster `yaml:"cluster" json:"cluster"`
	// Proxier is kube-proxy's configuration, defaulted and validated by the
	// proxier package itself; its node is cluster.node.
	Proxier   proxier.Config `yaml:"proxier" json:"proxier"`
	Dataplane Dataplane      `yaml:"dataplane" json:"dataplane"`
	Probes    Probes         `yaml:"probes" json:"probes"`
	Timeline  []Step         `yaml:"timeline" json:"timeline"`
	// StopAfterFailedSyncs ends the run with an error once this many syncs
	// of one proxier in a row have failed (0: never): a proxier that cannot
	// program the node retries for ever, and a run that only retries
	// measures nothing. Default 5.
	StopAfterFailedSyncs int `yaml:"stopAfterFailedSyncs" json:"stopAfterFailedSyncs"`
	// MemoryLimit is a soft limit on the heap of the kpsim process that
	// runs the scenario (`kpsim run`; Go's GOMEMLIMIT, which wins when
	// set), as a Kubernetes quantity ("1200Mi"): past it the collector
	// runs more often, trading CPU for a lower peak. A run that needs more
	// than the limit still runs, slower. Empty: no limit, the heap grows to
	// about twice what is live.
	MemoryLimit string `yaml:"memoryLimit" json:"memoryLimit,omitempty"`

	file string // where it was read from, for relative paths
	// fromFileSet: cluster.fromFile came from --set, so a relative path is
	// relative to the working directory, where it was typed.
	fromFileSet bool
	warnings    []string        // findings that do not stop the run, see Warnings
	set         *objects.Set    // the cluster, built by Parse
	targets     []record.Target // what probes probe in set, chosen by Parse
	gen         *generator      // allocates from the cluster's pools as the timeline runs
	ran         bool            // a scenario's generator state is consumed by one run
}

// MemoryLimitBytes is MemoryLimit in bytes; 0 when there is none.
func (s *Scenario) MemoryLimitBytes() int64 {
	q, err := resource.ParseQuantity(s.MemoryLimit)
	if err != nil {
		return 0 // empty, or refused by validation
	}
	return q.Value()
}

// proxierConfig is the proxier section for the scenario's node.
func (s *Scenario) proxierConfig() proxier.Config {
	cfg := s.Proxier
	cfg.NodeName = s.Cluster.Node.Name
	return cfg
}

// Warnings are what loading found questionable but runnable: a deprecated
// key, a cluster larger than one of kube-proxy's ipsets can hold.
func (s *Scenario) Warnings() []string { return s.warnings }

// Sim configures the in-memory kernel.
type Sim struct {
	// Profile is an embedded cost profile name or a profile file.
	Profile string `yaml:"profile" json:"profile"`
	// TimeScale is the share of modeled kernel cost spent as wall time: 0
	// runs as fast as possible (durations still report the modeled cost), 1
	// makes the proxier, and the probes, feel the kernel in real time.
	TimeScale float64 `yaml:"timeScale" json:"timeScale"`
}

// Cluster describes the generated cluster, or names an export to load.
type Cluster struct {
	// FromFile loads Services and EndpointSlices from a kubectl export
	// (`kubectl get services,endpointslices -A -o json`, see
	// objects) instead of generating them; a relative path is
	// relative to the scenario file (to the working directory with --set).
	// Services, KubeDNS and APIServer are then not allowed (a --set of
	// fromFile drops the file's); the other generator fields shape what
	// addServices adds.
	FromFile string `yaml:"fromFile" json:"fromFile,omitempty"`

	Services int `yaml:"services" json:"services"`
	// Types are shares of Services by type; the rest are ClusterIP.
	Types ServiceTypes `yaml:"types" json:"types"`
	// PortsPerService and EndpointsPerService are each service's: one
	// number, or weights per number that each service draws from.
	PortsPerService     PerService `yaml:"portsPerService" json:"portsPerService"`
	EndpointsPerService PerService `yaml:"endpointsPerService" json:"endpointsPerService"`
	Namespaces          int        `yaml:"namespaces" json:"namespaces"`
	// Nodes is the cluster's node count; endpoints are spread over them and
	// 1/Nodes of them are local to the proxier's node (they matter for
	// KUBE-LOOP-BACK and externalTrafficPolicy Local).
	Nodes int `yaml:"nodes" json:"nodes"`
	// Shares of services (each drawn independently from the seed).
	DualStack       float64 `yaml:"dualStack" json:"dualStack"`
	UDP             float64 `yaml:"udp" json:"udp"`   // share of service ports
	SCTP            float64 `yaml:"sctp" json:"sctp"` // share of service ports
	SessionAffinity float64 `yaml:"sessionAffinity" json:"sessionAffinity"`
	// ExternalTrafficPolicyLocal is the share of NodePort and LoadBalancer
	// services with externalTrafficPolicy Local.
	ExternalTrafficPolicyLocal float64 `yaml:"externalTrafficPolicyLocal" json:"externalTrafficPolicyLocal"`
	// KubeDNS adds kube-system/kube-dns (dns UDP 53, dns-tcp TCP 53) as
	// every cluster has it, so scenarios can churn and probe it by name.
	KubeDNS bool `yaml:"kubeDNS" json:"kubeDNS"`
	// APIServer adds default/kubernetes (https 443 to the API servers' 6443)
	// at the service CIDR's first address, as every cluster has it: what a
	// node's own components dial first.
	APIServer bool `yaml:"apiServer" json:"apiServer"`

	ServiceCIDRs []string `yaml:"serviceCIDRs" json:"serviceCIDRs"` // one per family
	PodCIDRs     []string `yaml:"podCIDRs" json:"podCIDRs"`         // one per family
	// ExternalCIDRs hold load-balancer ingress IPs and external IPs, one per family.
	ExternalCIDRs []string `yaml:"externalCIDRs" json:"externalCIDRs"`
	// NodePortRange is where NodePorts are allocated from, as
	// kube-apiserver's --service-node-port-range: "30000-32767" by
	// default, wider when the cluster's NodePorts need it (cluster_sizes.go).
	NodePortRange string `yaml:"nodePortRange" json:"nodePortRange"`
	Node          Node   `yaml:"node" json:"node"`
}

// ServiceTypes are shares of services by type.
type ServiceTypes struct {
	NodePort     float64 `yaml:"nodePort" json:"nodePort"`
	LoadBalancer float64 `yaml:"loadBalancer" json:"loadBalancer"`
	// ExternalIPs are ClusterIP services that also carry one external IP.
	ExternalIPs float64 `yaml:"externalIPs" json:"externalIPs"`
}

// Node is the node the proxier runs on.
type Node struct {
	Name      string   `yaml:"name" json:"name"`
	Addresses []string `yaml:"addresses" json:"addresses"` // with prefix length, e.g. 192.168.0.10/24
}

// Dataplane says how the proxier's kernel operations reach the kernel: a
// property of the node's tooling, not a kube-proxy setting.
type Dataplane struct {
	// IPSet is how ipset changes are written: exec (a process per entry, as
	// kube-proxy does), restore (one `ipset restore` per sync, the default,
	// dataplane.DefaultIPSetStrategy) or netlink.
	IPSet dataplane.IPSetStrategy `yaml:"ipset" json:"ipset"`
}

// Probes configure connection attempts through the dataplane. Probing runs
// between `probes: on` and `probes: off` steps.
type Probes struct {
	// Interval between rounds; each round makes one attempt per target.
	Interval Duration `yaml:"interval" json:"interval"`
	// Services to probe: a count (chosen from the seed), a namespace/name
	// list, or both ({count: 20, names: [default/kubernetes]}).
	Services Selector `yaml:"services" json:"services"`
	// Kinds of address probed per service: clusterip, nodeport, external, loadbalancer.
	Kinds []string `yaml:"kinds" json:"kinds"`
	// From is where connections start: pod (a pod on the node, the default)
	// and node (a process in the node's own network namespace, as the
	// kubelet or a CNI agent: its connections to a service address need
	// kube-proxy's masquerade rules, see sim.Kernel.ProbeFromNode).
	From []string `yaml:"from" json:"from"`
}

// ProbeFroms are where probes can start.
var ProbeFroms = []string{record.FromPod, record.FromNode}

// Selector picks services: a count drawn from the seed, names, or (for
// probes) the names and a count more.
type Selector struct {
	Count int      `yaml:"count"`
	Names []string `yaml:"names"` // namespace/name
}

// Empty reports whether the selector selects nothing.
func (s Selector) Empty() bool { return s.Count == 0 && len(s.Names) == 0 }

func (s Selector) MarshalJSON() ([]byte, error) {
	switch {
	case len(s.Names) > 0 && s.Count > 0:
		return json.Marshal(map[string]any{"count": s.Count, "names": s.Names})
	case len(s.Names) > 0:
		return json.Marshal(s.Names)
	}
	return json.Marshal(s.Count)
}

func (s *Selector) decodeNode(d *decoder, n *yaml.Node, path string) error {
	switch n.Kind {
	case yaml.SequenceNode:
		return d.decode(n, &s.Names, path)
	case yaml.MappingNode:
		return d.decodeStruct(n, s, path)
	}
	return d.decode(n, &s.Count, path)
}

// Switch is on or off; YAML accepts on/off and true/false.
type Switch bool

func (s Switch) MarshalJSON() ([]byte, error) {
	if s {
		return []byte(`"on"`), nil
	}
	return []byte(`"off"`), nil
}

func (s *Switch) decodeNode(d *decoder, n *yaml.Node, path string) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		switch n.Value {
		case "on":
			*s = true
			return nil
		case "off":
			*s = false
			return nil
		}
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return d.errAt(n, path, "must be on or off, got %s", Describe(n))
	}
	if err := n.Decode(&b); err != nil {
		return d.errAt(n, path, "must be on or off: %v", err)
	}
	*s = Switch(b)
	return nil
}

// Duration is a time.Duration written as a Go duration string ("500ms").
type Duration time.Duration

// D returns the duration as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

func (d *Duration) decodeNode(dec *decoder, n *yaml.Node, path string) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" && n.Value == "0" {
		// A bare 0 is the zero duration, as time.ParseDuration reads "0": a
		// zero then meets the same checks whichever way it was written.
		*d = 0
		return nil
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return dec.errAt(n, path, "must be a duration such as \"500ms\" or \"2m\", got %s", Describe(n))
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return dec.errAt(n, path, "must be a duration such as \"500ms\" or \"2m\": %q", n.Value)
	}
	if v < 0 {
		return dec.errAt(n, path, "must not be negative")
	}
	*d = Duration(v)
	return nil
}
