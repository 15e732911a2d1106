package explain

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/announce"
	"github.com/herald-lb/herald/internal/config"
	"github.com/herald-lb/herald/internal/ipam"
	"github.com/herald-lb/herald/internal/svcreq"
)

// AllocationConditionType is the Service condition the controller writes
// (internal/k8s/allocation.ConditionType; a test there keeps them equal).
const AllocationConditionType = "herald.io/IPAllocated"

// LiveNote says where the live set comes from; every report that depends on
// it carries it (LiveNodesNote when memberlist is off).
const LiveNote = "live speakers: nodes whose speaker Pod is Running and Ready (memberlist's member list is not in the API)"

// LiveNodesNote is LiveNote for speakers without memberlist.
const LiveNodesNote = "live speakers: the speakers run without memberlist, so, as they do, nodes that are Ready, network available and not tainted out-of-service (announce.LiveFromNodeConditions)"

// Cluster is everything the explanations read, as listed by the caller.
type Cluster struct {
	// Namespace is Herald's namespace (configuration objects, status
	// objects, speaker Pods).
	Namespace string
	// Resources are the configuration objects and every Node
	// (configload.Read). Secrets may be missing (SecretsUnreadable).
	Resources config.Resources
	// SecretsUnreadable: the user may not list Secrets. BGPPeers' missing
	// passwords are then ignored (config.Options.IgnoreTransient) instead
	// of leaving the peer out as the speakers would.
	SecretsUnreadable bool
	// Services are every Service of the cluster (the allocator replay
	// needs them all), EndpointSlices theirs.
	Services       []corev1.Service
	EndpointSlices []discoveryv1.EndpointSlice
	// Namespaces, for serviceAllocation namespaceSelectors.
	Namespaces []corev1.Namespace
	// SpeakerPods are the speaker Pods in Herald's namespace.
	SpeakerPods []corev1.Pod
	// Status objects and ConfigurationStates in Herald's namespace.
	L2Statuses   []v1beta1.ServiceL2Status
	BGPStatuses  []v1beta1.ServiceBGPStatus
	ConfigStates []v1beta1.ConfigurationState
	// SessionStates are the speakers' BGPSessionState objects
	// (herald.io/v1alpha1) in Herald's namespace; nil when the CRD is not
	// installed (an older Herald).
	SessionStates []v1alpha1.BGPSessionState
	// Events of the Services and BGPPeers explained (may hold others).
	Events []corev1.Event
	// Options are the speakers' settings (--lb-class, --ignore-exclude-lb),
	// read from the speaker Pods' arguments by the caller.
	Options announce.Options
	// ControllerLBClass is the controller's --lb-class.
	ControllerLBClass string
	// Elections are the layer 2 elections the speaker Pods run, one per
	// Pod, read from their arguments by the caller (--l2-election,
	// --ml-key-derivation; ElectionFromFlags). Nodes whose speaker is not
	// listed take the election most speakers run; with none listed, the
	// speaker's default (per-address).
	Elections []SpeakerElection
	// MemberlistDisabled: the speakers run without memberlist (no
	// --ml-bindaddr or --ml-labels) and take liveness from the Node
	// conditions (announce.LiveFromNodeConditions), as the explanations
	// then do.
	MemberlistDisabled bool
}

// view is the derived state shared by the explanations.
type view struct {
	c        *Cluster
	snap     *config.Snapshot // the cluster's (controller's) snapshot
	buildErr error
	nodeSnap map[string]*config.Snapshot
	nodeErr  map[string]error
	nodes    []announce.Node
	live     map[string]bool
	liveNote string
	nsLabels map[string]map[string]string
	// alloc is the replayed allocator; importErr the Import error of each
	// Service whose shown addresses it refused.
	alloc     *ipam.Allocator
	importErr map[string]error
	reqErr    map[string]error
	reqs      map[string]ipam.Request
	// elect are the speakers' layer 2 elections.
	elect *elections
}

func (c *Cluster) buildOptions(node string) config.Options {
	return config.Options{Namespace: c.Namespace, NodeName: node, DropTransient: true, IgnoreTransient: c.SecretsUnreadable}
}

func newView(c *Cluster) *view {
	v := &view{c: c, nodeSnap: map[string]*config.Snapshot{}, nodeErr: map[string]error{},
		nsLabels: map[string]map[string]string{}, importErr: map[string]error{}, reqErr: map[string]error{},
		reqs: map[string]ipam.Request{}, elect: newElections(c)}
	v.snap, v.buildErr = config.Build(c.Resources, c.buildOptions(""))
	nodes := slices.Clone(c.Resources.Nodes)
	slices.SortFunc(nodes, func(a, b corev1.Node) int { return cmp.Compare(a.Name, b.Name) })
	for i := range nodes {
		v.nodes = append(v.nodes, announce.NodeFromK8s(&nodes[i]))
	}
	v.live, v.liveNote = LiveFromPods(c.SpeakerPods), LiveNote
	if c.MemberlistDisabled {
		v.live, v.liveNote = announce.LiveFromNodeConditions(v.nodes), LiveNodesNote
	}
	for _, ns := range c.Namespaces {
		v.nsLabels[ns.Name] = ns.Labels
	}
	v.replay()
	return v
}

// nodeSnapshot returns the configuration snapshot the speaker on node
// builds.
func (v *view) nodeSnapshot(node string) (*config.Snapshot, error) {
	if s, ok := v.nodeSnap[node]; ok {
		return s, v.nodeErr[node]
	}
	s, err := config.Build(v.c.Resources, v.c.buildOptions(node))
	v.nodeSnap[node], v.nodeErr[node] = s, err
	return s, err
}

// LiveFromPods returns the live set the explanations use: node name ->
// true for every node running a speaker Pod that is Running with the Ready
// condition True (see LiveNote).
func LiveFromPods(pods []corev1.Pod) map[string]bool {
	out := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				out[p.Spec.NodeName] = true
			}
		}
	}
	return out
}

// notLiveWhy says why node's speaker is not live: its Node's conditions
// without memberlist, else its speaker Pod's state.
func (v *view) notLiveWhy(node string) string {
	if !v.c.MemberlistDisabled {
		return v.speakerPodState(node)
	}
	for _, n := range v.nodes {
		if n.Name != node {
			continue
		}
		var why []string
		if !n.Ready {
			why = append(why, "not Ready")
		}
		if n.NetworkUnavailable {
			why = append(why, "NetworkUnavailable")
		}
		if n.OutOfService {
			why = append(why, "tainted "+announce.OutOfServiceTaint)
		}
		return fmt.Sprintf("Node %s is %s (no memberlist: liveness from Node conditions)", node, strings.Join(why, ", "))
	}
	return "the Node does not exist"
}

// speakerPodState describes the speaker Pod of node for "not live" lines.
func (v *view) speakerPodState(node string) string {
	for i := range v.c.SpeakerPods {
		p := &v.c.SpeakerPods[i]
		if p.Spec.NodeName != node {
			continue
		}
		ready := "not Ready"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = "Ready"
			}
		}
		return fmt.Sprintf("speaker Pod %s is %s, %s", p.Name, p.Status.Phase, ready)
	}
	return "no speaker Pod runs on the node"
}

// handled returns the Services the controller allocates for, in key order.
func (v *view) handled() []*corev1.Service {
	var out []*corev1.Service
	for i := range v.c.Services {
		s := &v.c.Services[i]
		if svcreq.Handled(s, v.c.ControllerLBClass) {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Service) int { return strings.Compare(svcreq.Key(a), svcreq.Key(b)) })
	return out
}

// replay rebuilds the controller's allocator as after a restart
// (internal/k8s/allocation's import): pools, then in key order each
// Service's shown addresses (SetStatus) and their import.
func (v *view) replay() {
	v.alloc = ipam.New()
	if v.snap == nil {
		return
	}
	if _, err := v.alloc.SetPools(svcreq.PoolsFor(v.snap)); err != nil {
		v.buildErr = fmt.Errorf("pools: %w", err)
		return
	}
	for _, s := range v.handled() {
		key := svcreq.Key(s)
		req, err := svcreq.RequestFor(s, v.nsLabels[s.Namespace])
		v.reqs[key] = req
		if err != nil {
			v.reqErr[key] = err
		}
		ips := svcreq.IngressIPs(s)
		v.alloc.SetStatus(key, ips)
		if err != nil || len(ips) == 0 {
			continue
		}
		if _, err := v.alloc.Import(key, ips, req); err != nil {
			v.importErr[key] = err
		}
	}
}

// endpoints returns the endpoints of the Service ns/name.
func (v *view) endpoints(ns, name string) []announce.Endpoint {
	var eps []discoveryv1.EndpointSlice
	for _, s := range v.c.EndpointSlices {
		if s.Namespace == ns && s.Labels[discoveryv1.LabelServiceName] == name {
			eps = append(eps, s)
		}
	}
	return announce.EndpointsFromSlices(eps)
}

// sharing returns the other Services holding one of svc's addresses, as the
// speaker gathers them.
func (v *view) sharing(svc *corev1.Service) []announce.SharedService {
	var out []announce.SharedService
	mine := announce.ServiceFromK8s(svc)
	for i := range v.c.Services {
		o := &v.c.Services[i]
		if o.Namespace == svc.Namespace && o.Name == svc.Name {
			continue
		}
		theirs := announce.ServiceFromK8s(o)
		if !slices.ContainsFunc(theirs.IPs, func(ip netip.Addr) bool { return slices.Contains(mine.IPs, ip) }) {
			continue
		}
		out = append(out, announce.SharedService{Service: theirs, Endpoints: v.endpoints(o.Namespace, o.Name)})
	}
	return out
}
