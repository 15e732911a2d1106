package herald

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1alpha1"
	"github.com/herald-lb/herald/api/v1beta1"
	"github.com/herald-lb/herald/internal/config"
	"github.com/herald-lb/herald/internal/explain"
	"github.com/herald-lb/herald/internal/k8s/configload"
)

// labelComponent tells Herald's Pods apart (manifests/base and the chart:
// "speaker", "controller").
const labelComponent = "app.kubernetes.io/component"

// ErrHeraldNotFound: Herald's namespace holds none of Herald's objects
// (Read's error wraps it and names the namespace). Its text is "Herald
// not found" (a proper name, hence its own type).
var ErrHeraldNotFound error = notFound{}

// Read lists, with c, everything the explanations read: the configuration
// objects in Herald's namespace heraldNS (configload.Read, as the
// components read them; Secrets are skipped when the user may not list
// them), every Node, Service, EndpointSlice and Namespace, Herald's Pods,
// status objects and ConfigurationStates, and the events in heraldNS and in
// eventNS ("" none). The speakers' and the controller's --lb-class and
// --ignore-exclude-lb come from their Pods' arguments. Errors name the
// kind that could not be listed. Each speaker Pod's layer 2 election
// (--l2-election, --ml-key-derivation) is read from its arguments
// (Cluster.Elections). When heraldNS has no speaker or controller
// Pod, no ConfigurationState and no configuration object (a wrong
// --herald-namespace), Read returns an error wrapping ErrHeraldNotFound
// rather than explanations of a cluster without Herald.
func Read(ctx context.Context, c client.Reader, heraldNS, eventNS string) (*explain.Cluster, error) {
	cl := &explain.Cluster{Namespace: heraldNS}
	res, err := configload.Read(ctx, c, heraldNS)
	if err != nil && strings.Contains(err.Error(), "list Secrets") && apierrors.IsForbidden(err) {
		cl.SecretsUnreadable = true
		res, err = configload.Read(ctx, noSecrets{c}, heraldNS)
	}
	if err != nil {
		return nil, err
	}
	cl.Resources = res
	var (
		svcs  corev1.ServiceList
		eps   discoveryv1.EndpointSliceList
		nss   corev1.NamespaceList
		pods  corev1.PodList
		l2s   v1beta1.ServiceL2StatusList
		bgps  v1beta1.ServiceBGPStatusList
		confs v1beta1.ConfigurationStateList
	)
	in := client.InNamespace(heraldNS)
	for _, l := range []struct {
		kind string
		list client.ObjectList
		opts []client.ListOption
	}{
		{"Services", &svcs, nil},
		{"EndpointSlices", &eps, nil},
		{"Namespaces", &nss, nil},
		// Every Pod of Herald's namespace, told apart by their component
		// label (the chart's name label follows nameOverride).
		{"Pods", &pods, []client.ListOption{in}},
		{"ServiceL2Statuses", &l2s, []client.ListOption{in}},
		{"ServiceBGPStatuses", &bgps, []client.ListOption{in}},
		{"ConfigurationStates", &confs, []client.ListOption{in}},
	} {
		if err := c.List(ctx, l.list, l.opts...); err != nil {
			return nil, fmt.Errorf("list %s: %w", l.kind, err)
		}
	}
	cl.Services, cl.EndpointSlices, cl.Namespaces = svcs.Items, eps.Items, nss.Items
	cl.L2Statuses, cl.BGPStatuses, cl.ConfigStates = l2s.Items, bgps.Items, confs.Items
	// BGPSessionStates exist from the Herald that writes them on; without
	// the CRD (an older install) the session state comes from events.
	var sessions v1alpha1.BGPSessionStateList
	switch err := c.List(ctx, &sessions, in); {
	case err == nil:
		cl.SessionStates = append([]v1alpha1.BGPSessionState{}, sessions.Items...)
	case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
	default:
		return nil, fmt.Errorf("list BGPSessionStates: %w", err)
	}
	controller := false
	for i := range pods.Items {
		p := &pods.Items[i]
		switch p.Labels[labelComponent] {
		case "speaker":
			cl.SpeakerPods = append(cl.SpeakerPods, *p)
			if v, ok := flagValue(p, "lb-class"); ok {
				cl.Options.LoadBalancerClass = v
			}
			if v, ok := flagValue(p, "ignore-exclude-lb"); ok && v != "false" {
				cl.Options.IgnoreExcludeLB = true
			}
			cl.Elections = append(cl.Elections, speakerElection(p))
			// MetalLB's rule (speaker/flags.go): memberlist runs with both
			// --ml-bindaddr and --ml-labels (or their METALLB_* variables).
			if !setting(p, "ml-bindaddr", "METALLB_ML_BIND_ADDR") || !setting(p, "ml-labels", "METALLB_ML_LABELS") {
				cl.MemberlistDisabled = true
			}
		case "controller":
			controller = true
			if v, ok := flagValue(p, "lb-class"); ok {
				cl.ControllerLBClass = v
			}
		}
	}
	if len(cl.SpeakerPods) == 0 && !controller && len(cl.ConfigStates) == 0 && !hasConfig(&res) {
		return nil, fmt.Errorf("%w in namespace %s: no speaker or controller Pods, no ConfigurationState, no configuration objects; pass --herald-namespace (MetalLB's in-place install uses metallb-system)",
			ErrHeraldNotFound, heraldNS)
	}
	for i, ns := range []string{heraldNS, eventNS} {
		if ns == "" || (i == 1 && ns == heraldNS) {
			continue
		}
		var evs corev1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return nil, fmt.Errorf("list Events in %s: %w", ns, err)
		}
		cl.Events = append(cl.Events, evs.Items...)
	}
	return cl, nil
}

type notFound struct{}

func (notFound) Error() string { return "Herald not found" }

// hasConfig reports whether res holds one of Herald's configuration objects
// (Nodes and Secrets are not Herald's).
func hasConfig(res *config.Resources) bool {
	return len(res.Pools)+len(res.L2Advertisements)+len(res.BGPAdvertisements)+len(res.Peers)+len(res.Communities)+len(res.BFDProfiles) > 0
}

// flagValue returns the value of --name in the Pod's first container's
// command and arguments ("true" for a bare boolean flag), as Go's flag
// package reads them: -name or --name, "=value" or the next argument, the
// last occurrence winning, nothing after a "--" argument.
func flagValue(p *corev1.Pod, name string) (string, bool) {
	if len(p.Spec.Containers) == 0 {
		return "", false
	}
	args := append(append([]string{}, p.Spec.Containers[0].Command...), p.Spec.Containers[0].Args...)
	val, found := "", false
	for i, a := range args {
		if a == "--" {
			break
		}
		flag := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if flag == a {
			continue // not a flag
		}
		switch {
		case flag == name:
			val, found = "true", true
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				val = args[i+1]
			}
		case strings.HasPrefix(flag, name+"="):
			val, found = strings.TrimPrefix(flag, name+"="), true
		}
	}
	return val, found
}

// speakerElection reads the layer 2 election of a speaker Pod from its
// --l2-election and --ml-key-derivation arguments (neither has an
// environment variable): explain.ElectionFromFlags. The Pod's arguments,
// rather than the DaemonSet's template, are what the running speaker was
// started with: during a rollout old and new Pods differ, and each is
// reported as it runs.
func speakerElection(p *corev1.Pod) explain.SpeakerElection {
	l2, _ := flagValue(p, "l2-election")
	kd, _ := flagValue(p, "ml-key-derivation")
	s := explain.SpeakerElection{Pod: p.Name, Node: p.Spec.NodeName}
	e, err := explain.ElectionFromFlags(l2, kd)
	if err != nil {
		s.Error = err.Error()
	}
	s.Election = e
	return s
}

// noSecrets is a reader that returns an empty Secret list.
type noSecrets struct{ client.Reader }

func (n noSecrets) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*corev1.SecretList); ok {
		return nil
	}
	return n.Reader.List(ctx, list, opts...)
}

// setting reports whether the Pod's first container sets flag --name to a
// non-empty value, or the environment variable env (a value or a
// valueFrom).
func setting(p *corev1.Pod, name, env string) bool {
	if v, ok := flagValue(p, name); ok {
		return v != ""
	}
	if len(p.Spec.Containers) == 0 {
		return false
	}
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == env {
			return e.Value != "" || e.ValueFrom != nil
		}
	}
	return false
}
