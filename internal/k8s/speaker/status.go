package speaker

import (
	"context"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/equality"
	kerrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/herald-lb/herald/api/v1beta1"
)

// statusRecord is what the speaker knows of its status objects of one kind
// for one Service: when known, objs are the objects as last listed or
// written, so an unchanged decision costs no API request.
type statusRecord[T any] struct {
	known bool
	objs  []T
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

// planL2Status plans the ServiceL2Status objects of one Service: desired
// nil means none.
func planL2Status(desired *v1beta1.ServiceL2StatusStatus, existing []v1beta1.ServiceL2Status) statusPlan {
	return planStatus(desired != nil, len(existing),
		func(i int) bool {
			return compatibleCommon(existing[i].Status.ServiceStatusCommon, desired.ServiceStatusCommon)
		},
		func(i int) bool { return apierrors.Semantic.DeepEqual(existing[i].Status, *desired) })
}

// planBGPStatus plans the ServiceBGPStatus objects of one Service.
func planBGPStatus(desired *v1beta1.ServiceBGPStatusStatus, existing []v1beta1.ServiceBGPStatus) statusPlan {
	return planStatus(desired != nil, len(existing),
		func(i int) bool {
			return compatibleCommon(existing[i].Status.ServiceStatusCommon, desired.ServiceStatusCommon)
		},
		func(i int) bool { return apierrors.Semantic.DeepEqual(existing[i].Status, *desired) })
}

func (s *Speaker) statusLabels(svc types.NamespacedName) map[string]string {
	return map[string]string{
		v1beta1.LabelNode:             s.opts.NodeName,
		v1beta1.LabelServiceName:      svc.Name,
		v1beta1.LabelServiceNamespace: svc.Namespace,
	}
}

func (s *Speaker) newStatusMeta(ctx context.Context, prefix string, svc types.NamespacedName) metav1.ObjectMeta {
	m := metav1.ObjectMeta{GenerateName: prefix, Namespace: s.opts.Namespace, Labels: s.statusLabels(svc)}
	if owner := s.ownerRef(ctx); owner != nil {
		m.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return m
}

func (s *Speaker) applyL2Status(ctx context.Context, svc types.NamespacedName, desired *v1beta1.ServiceL2StatusStatus, rec *statusRecord[v1beta1.ServiceL2Status]) error {
	if !rec.known {
		var list v1beta1.ServiceL2StatusList
		if err := s.apiReader.List(ctx, &list, client.InNamespace(s.opts.Namespace), client.MatchingLabels(s.statusLabels(svc))); err != nil {
			return fmt.Errorf("list ServiceL2Status of %s: %w", svc, err)
		}
		sortByName(list.Items, func(o *v1beta1.ServiceL2Status) string { return o.Name })
		rec.objs, rec.known = list.Items, true
	}
	plan := planL2Status(desired, rec.objs)
	if plan.Keep < 0 && !plan.Create && len(plan.Delete) == 0 {
		return nil
	}
	rec.known = false // until everything below succeeded
	for _, i := range plan.Delete {
		if err := s.client.Delete(ctx, &rec.objs[i]); err != nil && !kerrors.IsNotFound(err) {
			return fmt.Errorf("delete ServiceL2Status %s: %w", rec.objs[i].Name, err)
		}
	}
	var kept []v1beta1.ServiceL2Status
	switch {
	case plan.Create:
		obj := &v1beta1.ServiceL2Status{ObjectMeta: s.newStatusMeta(ctx, "l2-", svc)}
		if err := s.client.Create(ctx, obj); err != nil {
			return fmt.Errorf("create ServiceL2Status for %s: %w", svc, err)
		}
		obj.Status = *desired
		if err := s.client.Status().Update(ctx, obj); err != nil {
			return fmt.Errorf("write ServiceL2Status %s: %w", obj.Name, err)
		}
		kept = append(kept, *obj)
	case plan.Keep >= 0:
		obj := rec.objs[plan.Keep].DeepCopy()
		if plan.Update {
			obj.Status = *desired
			if err := s.client.Status().Update(ctx, obj); err != nil {
				return fmt.Errorf("write ServiceL2Status %s: %w", obj.Name, err)
			}
		}
		kept = append(kept, *obj)
	}
	rec.objs, rec.known = kept, true
	return nil
}

func (s *Speaker) applyBGPStatus(ctx context.Context, svc types.NamespacedName, desired *v1beta1.ServiceBGPStatusStatus, rec *statusRecord[v1beta1.ServiceBGPStatus]) error {
	if !rec.known {
		var list v1beta1.ServiceBGPStatusList
		if err := s.apiReader.List(ctx, &list, client.InNamespace(s.opts.Namespace), client.MatchingLabels(s.statusLabels(svc))); err != nil {
			return fmt.Errorf("list ServiceBGPStatus of %s: %w", svc, err)
		}
		sortByName(list.Items, func(o *v1beta1.ServiceBGPStatus) string { return o.Name })
		rec.objs, rec.known = list.Items, true
	}
	plan := planBGPStatus(desired, rec.objs)
	if plan.Keep < 0 && !plan.Create && len(plan.Delete) == 0 {
		return nil
	}
	rec.known = false
	for _, i := range plan.Delete {
		if err := s.client.Delete(ctx, &rec.objs[i]); err != nil && !kerrors.IsNotFound(err) {
			return fmt.Errorf("delete ServiceBGPStatus %s: %w", rec.objs[i].Name, err)
		}
	}
	var kept []v1beta1.ServiceBGPStatus
	switch {
	case plan.Create:
		obj := &v1beta1.ServiceBGPStatus{ObjectMeta: s.newStatusMeta(ctx, "bgp-", svc)}
		if err := s.client.Create(ctx, obj); err != nil {
			return fmt.Errorf("create ServiceBGPStatus for %s: %w", svc, err)
		}
		obj.Status = *desired
		if err := s.client.Status().Update(ctx, obj); err != nil {
			return fmt.Errorf("write ServiceBGPStatus %s: %w", obj.Name, err)
		}
		kept = append(kept, *obj)
	case plan.Keep >= 0:
		obj := rec.objs[plan.Keep].DeepCopy()
		if plan.Update {
			obj.Status = *desired
			if err := s.client.Status().Update(ctx, obj); err != nil {
				return fmt.Errorf("write ServiceBGPStatus %s: %w", obj.Name, err)
			}
		}
		kept = append(kept, *obj)
	}
	rec.objs, rec.known = kept, true
	return nil
}

// listOwnStatus lists this node's status objects, grouped by Service key.
func (s *Speaker) listOwnStatus(ctx context.Context) (map[string]*existingStatus, error) {
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
