package speaker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
)

// statusRecord is what the speaker knows of its status objects of one kind
// for one Service: when known, objs are the objects as last listed or
// written, so an unchanged decision costs no API request.
type statusRecord[S any] struct {
	known bool
	objs  []statusObject[S]
}

// statusObject is what the speaker keeps of one of its status objects (S
// is its status): the name a delete or an update names, the
// resourceVersion an update must carry, and the status a plan compares.
// The status subresource ignores the rest of the object on update.
type statusObject[S any] struct {
	name, resourceVersion string
	status                S
}

// statusPlan says how to turn the existing status objects of one Service
// (of one kind, on this node) into the desired state: at most one object,
// whose immutable fields (node, serviceName, serviceNamespace) match.
type statusPlan struct {
	// Create a new object (no existing one can be kept).
	Create bool
	// Keep is the index of the existing object kept, -1 for none.
	Keep int
	// Update: the kept object's status must be rewritten.
	Update bool
	// Delete are the indexes of the objects to delete, ascending.
	Delete []int
}

// planStatus plans for n existing objects. want is whether an object should
// exist; compatible(i) whether object i can be updated to the desired status
// (its immutable fields are unset or equal); upToDate(i) whether its status
// already equals the desired one. An up-to-date object is kept in preference
// to a compatible one, then the lowest index.
func planStatus(want bool, n int, compatible, upToDate func(i int) bool) statusPlan {
	p := statusPlan{Keep: -1}
	if want {
		for i := 0; i < n && p.Keep < 0; i++ {
			if upToDate(i) {
				p.Keep = i
			}
		}
		for i := 0; i < n && p.Keep < 0; i++ {
			if compatible(i) {
				p.Keep, p.Update = i, true
			}
		}
		p.Create = p.Keep < 0
	}
	for i := 0; i < n; i++ {
		if i != p.Keep {
			p.Delete = append(p.Delete, i)
		}
	}
	return p
}

func compatibleCommon(have, want v1beta1.ServiceStatusCommon) bool {
	ok := func(h, w string) bool { return h == "" || h == w }
	return ok(have.Node, want.Node) && ok(have.ServiceName, want.ServiceName) && ok(have.ServiceNamespace, want.ServiceNamespace)
}

// planStatusOf plans for the n existing objects whose statuses status(i)
// returns; desired nil means none. common returns a status's immutable
// fields.
func planStatusOf[S any](desired *S, n int, status func(i int) *S, common func(*S) v1beta1.ServiceStatusCommon) statusPlan {
	return planStatus(desired != nil, n,
		func(i int) bool { return compatibleCommon(common(status(i)), common(desired)) },
		func(i int) bool { return equality.Semantic.DeepEqual(*status(i), *desired) })
}

func l2Common(s *v1beta1.ServiceL2StatusStatus) v1beta1.ServiceStatusCommon {
	return s.ServiceStatusCommon
}

func bgpCommon(s *v1beta1.ServiceBGPStatusStatus) v1beta1.ServiceStatusCommon {
	return s.ServiceStatusCommon
}

// planL2Status plans the ServiceL2Status objects of one Service: desired
// nil means none.
func planL2Status(desired *v1beta1.ServiceL2StatusStatus, existing []v1beta1.ServiceL2Status) statusPlan {
	return planStatusOf(desired, len(existing), func(i int) *v1beta1.ServiceL2StatusStatus { return &existing[i].Status }, l2Common)
}

// planBGPStatus plans the ServiceBGPStatus objects of one Service.
func planBGPStatus(desired *v1beta1.ServiceBGPStatusStatus, existing []v1beta1.ServiceBGPStatus) statusPlan {
	return planStatusOf(desired, len(existing), func(i int) *v1beta1.ServiceBGPStatusStatus { return &existing[i].Status }, bgpCommon)
}

func (s *Controller) statusLabels(svc types.NamespacedName) map[string]string {
	return map[string]string{
		v1beta1.LabelNode:             s.opts.NodeName,
		v1beta1.LabelServiceName:      svc.Name,
		v1beta1.LabelServiceNamespace: svc.Namespace,
	}
}

func (s *Controller) newStatusMeta(ctx context.Context, prefix string, svc types.NamespacedName) metav1.ObjectMeta {
	m := metav1.ObjectMeta{GenerateName: prefix, Namespace: s.opts.Namespace, Labels: s.statusLabels(svc)}
	if owner := s.ownerRef(ctx); owner != nil {
		m.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return m
}

// statusKind describes one status kind (ServiceL2Status or
// ServiceBGPStatus) for applyStatus: T is the object, S its status.
type statusKind[T any, S any] struct {
	id     statusKindID
	name   string // the kind, for error messages
	prefix string // metadata.generateName
	list   func(ctx context.Context, r client.Reader, opts ...client.ListOption) ([]T, error)
	create func(metav1.ObjectMeta) *T
	status func(*T) *S
	common func(*S) v1beta1.ServiceStatusCommon
}

var l2StatusKind = statusKind[v1beta1.ServiceL2Status, v1beta1.ServiceL2StatusStatus]{
	id: kindL2, name: "ServiceL2Status", prefix: "l2-",
	list: func(ctx context.Context, r client.Reader, opts ...client.ListOption) ([]v1beta1.ServiceL2Status, error) {
		var l v1beta1.ServiceL2StatusList
		err := r.List(ctx, &l, opts...)
		return l.Items, err
	},
	create: func(m metav1.ObjectMeta) *v1beta1.ServiceL2Status { return &v1beta1.ServiceL2Status{ObjectMeta: m} },
	status: func(o *v1beta1.ServiceL2Status) *v1beta1.ServiceL2StatusStatus { return &o.Status },
	common: l2Common,
}

var bgpStatusKind = statusKind[v1beta1.ServiceBGPStatus, v1beta1.ServiceBGPStatusStatus]{
	id: kindBGP, name: "ServiceBGPStatus", prefix: "bgp-",
	list: func(ctx context.Context, r client.Reader, opts ...client.ListOption) ([]v1beta1.ServiceBGPStatus, error) {
		var l v1beta1.ServiceBGPStatusList
		err := r.List(ctx, &l, opts...)
		return l.Items, err
	},
	create: func(m metav1.ObjectMeta) *v1beta1.ServiceBGPStatus { return &v1beta1.ServiceBGPStatus{ObjectMeta: m} },
	status: func(o *v1beta1.ServiceBGPStatus) *v1beta1.ServiceBGPStatusStatus { return &o.Status },
	common: bgpCommon,
}

// recordOf returns what the speaker keeps of objs (statusObject).
func recordOf[T any, PT interface {
	*T
	client.Object
}, S any](k statusKind[T, S], objs []T) []statusObject[S] {
	if len(objs) == 0 {
		return nil
	}
	out := make([]statusObject[S], len(objs))
	for i := range objs {
		o := PT(&objs[i])
		out[i] = statusObject[S]{name: o.GetName(), resourceVersion: o.GetResourceVersion(), status: *k.status(&objs[i])}
	}
	return out
}

// applyStatus makes this node's status objects of kind k for Service svc
// match desired (nil: none), listing them only when rec does not know them.
// check are objects the record held that left this node's selection
// (statusWriter.observe): when rec is listed, each is read by name, and
// one whose labels name neither another node nor another Service (a label
// was removed) is counted as the Service's again, its labels restored if it
// is kept. Every write is appended to echo, so that its watch event is
// recognised as the writer's own.
func applyStatus[T any, PT interface {
	*T
	client.Object
}, S any](ctx context.Context, s *Controller, k statusKind[T, S], svc types.NamespacedName, desired *S, rec *statusRecord[S], check []string, echo *[]statusEvent) error {
	var relabel []bool // objects whose labels must be restored, by index
	if !rec.known {
		items, err := k.list(ctx, s.apiReader, client.InNamespace(s.opts.Namespace), client.MatchingLabels(s.statusLabels(svc)))
		if err != nil {
			return fmt.Errorf("list %s of %s: %w", k.name, svc, err)
		}
		sortByName(items, func(o *T) string { return PT(o).GetName() })
		objs := recordOf[T, PT](k, items)
		for _, name := range check {
			if slices.ContainsFunc(objs, func(o statusObject[S]) bool { return o.name == name }) {
				continue
			}
			var obj T
			if err := s.apiReader.Get(ctx, client.ObjectKey{Namespace: s.opts.Namespace, Name: name}, PT(&obj)); apierrors.IsNotFound(err) {
				continue
			} else if err != nil {
				return fmt.Errorf("get %s %s: %w", k.name, name, err)
			}
			if !strayOf(PT(&obj).GetLabels(), s.statusLabels(svc)) {
				continue
			}
			if relabel == nil {
				relabel = make([]bool, len(objs))
			}
			objs = append(objs, recordOf[T, PT](k, []T{obj})...)
			relabel = append(relabel, true)
		}
		rec.objs, rec.known = objs, true
	}
	needsLabels := func(i int) bool { return relabel != nil && relabel[i] }
	plan := planStatus(desired != nil, len(rec.objs),
		func(i int) bool { return compatibleCommon(k.common(&rec.objs[i].status), k.common(desired)) },
		func(i int) bool {
			return !needsLabels(i) && equality.Semantic.DeepEqual(rec.objs[i].status, *desired)
		})
	if plan.Keep < 0 && !plan.Create && len(plan.Delete) == 0 {
		return nil
	}
	rec.known = false // until everything below succeeded
	// An object named as the record names it (its namespace is Herald's).
	named := func(o statusObject[S]) PT {
		return PT(k.create(metav1.ObjectMeta{Name: o.name, Namespace: s.opts.Namespace, ResourceVersion: o.resourceVersion}))
	}
	wrote := func(o client.Object) {
		*echo = append(*echo, statusEvent{kind: k.id, name: o.GetName(), rv: o.GetResourceVersion()})
	}
	for _, i := range plan.Delete {
		if err := s.client.Delete(ctx, named(rec.objs[i])); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s: %w", k.name, rec.objs[i].name, err)
		}
		*echo = append(*echo, statusEvent{kind: k.id, name: rec.objs[i].name, gone: true})
	}
	var kept []statusObject[S]
	switch {
	case plan.Create:
		obj := k.create(s.newStatusMeta(ctx, k.prefix, svc))
		if err := s.client.Create(ctx, PT(obj)); err != nil {
			return fmt.Errorf("create %s for %s: %w", k.name, svc, err)
		}
		wrote(PT(obj))
		*k.status(obj) = *desired
		if err := s.client.Status().Update(ctx, PT(obj)); err != nil {
			return fmt.Errorf("write %s %s: %w", k.name, PT(obj).GetName(), err)
		}
		wrote(PT(obj))
		kept = []statusObject[S]{keptObject(PT(obj), *k.status(obj), desired)}
	case plan.Keep >= 0 && (plan.Update || needsLabels(plan.Keep)):
		obj := named(rec.objs[plan.Keep])
		have := rec.objs[plan.Keep].status
		if needsLabels(plan.Keep) {
			// A merge patch of the three labels (others stay), checked
			// against the resourceVersion read.
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
				"resourceVersion": obj.GetResourceVersion(), "labels": s.statusLabels(svc)}})
			if err != nil {
				return err
			}
			if err := s.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
				return fmt.Errorf("restore the labels of %s %s: %w", k.name, obj.GetName(), err)
			}
			wrote(obj)
			have = *k.status((*T)(obj)) // the patch returned the object
		}
		if !equality.Semantic.DeepEqual(have, *desired) {
			// The status subresource takes the status and checks the
			// resourceVersion; the rest of the object is ignored.
			*k.status((*T)(obj)) = *desired
			if err := s.client.Status().Update(ctx, obj); err != nil {
				return fmt.Errorf("write %s %s: %w", k.name, obj.GetName(), err)
			}
			wrote(obj)
		}
		kept = []statusObject[S]{keptObject(obj, *k.status((*T)(obj)), desired)}
	case plan.Keep >= 0:
		kept = []statusObject[S]{rec.objs[plan.Keep]}
	}
	rec.objs, rec.known = kept, true
	return nil
}

// strayOf reports whether an object with labels, read by the name the
// writer knew it by, is still the one whose labels should be want: each of
// the three labels is missing or has its wanted value (a label was removed,
// none was changed to name another node or Service).
func strayOf(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; ok && got != v {
			return false
		}
	}
	return true
}

// keptObject is the record of obj, just written with status got: desired
// (whose memory the writer's desired state holds anyway) when got equals
// it.
func keptObject[S any](obj client.Object, got S, desired *S) statusObject[S] {
	if equality.Semantic.DeepEqual(got, *desired) {
		got = *desired
	}
	return statusObject[S]{name: obj.GetName(), resourceVersion: obj.GetResourceVersion(), status: got}
}

// listOwnStatus lists this node's status objects, grouped by Service key.
func (s *Controller) listOwnStatus(ctx context.Context) (map[string]*existingStatus, error) {
	out := map[string]*existingStatus{}
	get := func(labels map[string]string) *existingStatus {
		k := labels[v1beta1.LabelServiceNamespace] + "/" + labels[v1beta1.LabelServiceName]
		if out[k] == nil {
			out[k] = &existingStatus{}
		}
		return out[k]
	}
	sel := client.MatchingLabels{v1beta1.LabelNode: s.opts.NodeName}
	var l2 v1beta1.ServiceL2StatusList
	if err := s.apiReader.List(ctx, &l2, client.InNamespace(s.opts.Namespace), sel); err != nil {
		return nil, fmt.Errorf("list ServiceL2Status of node %s: %w", s.opts.NodeName, err)
	}
	sortByName(l2.Items, func(o *v1beta1.ServiceL2Status) string { return o.Name })
	for _, o := range l2.Items {
		e := get(o.Labels)
		e.l2 = append(e.l2, o)
	}
	var bgps v1beta1.ServiceBGPStatusList
	if err := s.apiReader.List(ctx, &bgps, client.InNamespace(s.opts.Namespace), sel); err != nil {
		return nil, fmt.Errorf("list ServiceBGPStatus of node %s: %w", s.opts.NodeName, err)
	}
	sortByName(bgps.Items, func(o *v1beta1.ServiceBGPStatus) string { return o.Name })
	for _, o := range bgps.Items {
		e := get(o.Labels)
		e.bgp = append(e.bgp, o)
	}
	return out, nil
}

func sortByName[T any](items []T, name func(*T) string) {
	sort.SliceStable(items, func(i, j int) bool { return name(&items[i]) < name(&items[j]) })
}
