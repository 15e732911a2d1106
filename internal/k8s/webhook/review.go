package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/herald-lb/herald/internal/config"
	"github.com/herald-lb/herald/internal/k8s/configload"
)

// ErrWrongNamespace is wrapped by the refusal of an object created or
// updated outside Herald's namespace.
var ErrWrongNamespace = errors.New("object outside Herald's namespace")

// ErrInvalid is wrapped by every refusal that comes from config.Build: the
// change makes the configuration invalid, or (DELETE) leaves a reference
// dangling.
var ErrInvalid = errors.New("configuration rejected")

// maxListed bounds how many unrelated, already stored problems a warning
// lists, so that a broken cluster does not flood every kubectl apply.
const maxListed = 3

// Operation is the admission operation under review.
type Operation string

// Operations the validators judge.
const (
	Create Operation = "CREATE"
	Update Operation = "UPDATE"
	Delete Operation = "DELETE"
)

// Reviewer judges a change to one metallb.io object against the whole stored
// configuration. It is safe for concurrent use.
type Reviewer struct {
	reader    client.Reader
	namespace string
	log       *slog.Logger
}

// NewReviewer returns a Reviewer that lists the current objects through
// reader (normally the manager's API reader, so that an object created a
// moment ago is seen) in Herald's namespace.
func NewReviewer(reader client.Reader, namespace string, log *slog.Logger) *Reviewer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reviewer{reader: reader, namespace: namespace, log: log}
}

// Change is one admission request, reduced to what Review needs.
type Change struct {
	Op   Operation
	Kind string // config.Kind* constant
	// Namespace and Name of the object under review.
	Namespace, Name string
	// Apply edits the stored resources into the state after the change: it
	// replaces or adds the object (CREATE, UPDATE) or removes it (DELETE).
	Apply func(*config.Resources)
}

// Review reads the stored configuration, applies the change and runs
// config.Build (the only validation) on the states before and after. It
// refuses the change (error wrapping ErrInvalid) when the state after has a
// validation error that the state before did not have, or one that names the
// object under review, or when a BGPAdvertisement created or updated names a
// Community alias that no Community defines; problems of unrelated objects that were already stored
// are only reported as a warning. A DELETE is also refused when it turns a
// reference into a dangling one (a Community alias still used by a
// BGPAdvertisement), unless Herald's namespace is being deleted. Objects
// created or updated outside Herald's namespace are refused (ErrWrongNamespace);
// deleting them is always allowed. The warnings are config's warnings that
// are new or about the object under review. A failure to read the stored
// objects is returned as is (the request is refused: failurePolicy is Fail).
func (r *Reviewer) Review(ctx context.Context, c Change) (admission.Warnings, error) {
	self := c.Kind + " " + c.Namespace + "/" + c.Name
	if c.Namespace != r.namespace {
		if c.Op == Delete {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: Herald only reads metallb.io objects in namespace %q and would ignore this one (%w)", self, r.namespace, ErrWrongNamespace)
	}
	before, err := configload.Read(ctx, r.reader, r.namespace)
	if err != nil {
		return nil, fmt.Errorf("review %s %s: read the stored configuration: %w", c.Op, self, err)
	}
	after := cloneResources(before)
	c.Apply(&after)

	opts := config.Options{Namespace: r.namespace, IgnoreTransient: true}
	snapBefore, errBefore := config.Build(before, opts)
	snapAfter, errAfter := config.Build(after, opts)
	invBefore, _ := config.Split(errBefore)
	invAfter, _ := config.Split(errAfter)
	if errAfter != nil && len(invAfter) == 0 {
		// Not a validation error (Build returns none other today): refuse
		// rather than admit something Build could not judge.
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, self, errAfter)
	}

	old := map[string]bool{}
	for _, e := range invBefore {
		old[e.Error()] = true
	}
	var blocking, unrelated []string
	for _, e := range invAfter {
		mine := c.Op != Delete && e.Kind == c.Kind && e.Namespace == c.Namespace && e.Name == c.Name
		if mine || !old[e.Error()] {
			blocking = append(blocking, e.Error())
		} else {
			unrelated = append(unrelated, e.Error())
		}
	}
	if len(blocking) > 0 {
		r.log.Info("admission refused", "operation", c.Op, "object", self, "errors", len(blocking))
		return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(blocking, "; "))
	}

	terminating := false
	if c.Op == Delete {
		if terminating, err = r.namespaceTerminating(ctx); err != nil {
			return nil, fmt.Errorf("review %s %s: %w", c.Op, self, err)
		}
	}
	if c.Op == Delete && !terminating {
		if dangling := r.newDangling(before, after); len(dangling) > 0 {
			r.log.Info("admission refused", "operation", c.Op, "object", self, "dangling", len(dangling))
			return nil, fmt.Errorf("%w: deleting %s would leave a dangling reference: %s", ErrInvalid, self, strings.Join(dangling, "; "))
		}
	}

	warnings := newWarnings(snapBefore, snapAfter, self)
	if c.Op != Delete && c.Kind == config.KindBGPAdvertisement {
		warnings = append(warnings, undefinedAliases(after, c, opts)...)
	}
	if c.Kind == config.KindL2Advertisement || c.Kind == config.KindBGPAdvertisement {
		warnings = append(warnings, unadvertised(snapBefore, snapAfter, r.namespace)...)
	}
	if c.Op == Delete && c.Kind == config.KindIPAddressPool {
		warnings = append(warnings, poolInUse(before, c.Name)...)
	}
	if c.Op == Update && c.Kind == config.KindIPAddressPool {
		warnings = append(warnings, poolShrunk(before, snapBefore, snapAfter, c.Name)...)
	}
	if len(unrelated) > 0 {
		warnings = append(warnings, "the stored configuration already has errors unrelated to this change (Herald keeps running its last valid configuration): "+listSome(unrelated))
	}
	return warnings, nil
}

// aliasHint follows the warning about a community that is neither a value
// nor a defined alias.
const aliasHint = "a community is AA:NN (RFC 1997) or large:AA:BB:CC (RFC 8092), else the name of an alias in a Community object: until a Community defines it, Herald keeps its last valid configuration and reports this in ConfigurationState"

// undefinedAliases returns a warning for each spec.communities entry of the
// BGPAdvertisement under review that names a Community alias no stored
// Community defines (a typo, or a Community not applied yet). config.Build
// reports those as transient, as for any reference, and IgnoreTransient
// drops them. They are admitted, as MetalLB admits them, so that a
// configuration applied in any order (kubectl apply -f of a directory, a
// GitOps sync) is not refused; the warning is what kubectl prints. Until
// the alias exists, the binaries keep the last good configuration and
// report the missing alias in ConfigurationState.
func undefinedAliases(after config.Resources, c Change, opts config.Options) []string {
	opts.IgnoreTransient = false
	_, err := config.Build(after, opts)
	_, transient := config.Split(err)
	var out []string
	for _, e := range transient {
		if e.Kind == c.Kind && e.Namespace == c.Namespace && e.Name == c.Name && e.Missing == config.KindCommunity {
			out = append(out, e.Error()+" ("+aliasHint+")")
		}
	}
	return out
}

// unadvertised warns about each pool an advertisement change leaves
// without any advertisement: its Services keep their addresses, but no node
// announces them any more. (A pool created before its advertisement, as in
// most files, is not warned about: that is the normal order.)
func unadvertised(before, after *config.Snapshot, namespace string) admission.Warnings {
	if before == nil || after == nil {
		return nil
	}
	var out admission.Warnings
	for _, pl := range before.Pools() {
		now, ok := after.Pool(pl.Name)
		if pl.Advertised() && ok && !now.Advertised() {
			out = append(out, fmt.Sprintf("%s %s/%s: no L2Advertisement or BGPAdvertisement selects this pool any more: its Services keep their addresses but no node announces them",
				config.KindIPAddressPool, namespace, pl.Name))
		}
	}
	return out
}

// poolInUse warns when a deleted pool still has addresses assigned (its
// status counters, written by the controller): those Services lose them
// and get a new address from another pool, or stay pending.
func poolInUse(before config.Resources, name string) admission.Warnings {
	for i := range before.Pools {
		p := &before.Pools[i]
		if p.Name != name {
			continue
		}
		if n := p.Status.AssignedIPv4 + p.Status.AssignedIPv6; n > 0 {
			return admission.Warnings{fmt.Sprintf("%s %s/%s had %d address(es) assigned: the Services holding them lose them and get an address from another pool or stay pending (ClearAssignment events)",
				config.KindIPAddressPool, p.Namespace, p.Name, n)}
		}
	}
	return nil
}

// poolShrunk warns when an update removes addresses from a pool whose status
// still counts assigned ones: the Services holding a removed address get
// another one or stay pending.
func poolShrunk(before config.Resources, snapBefore, snapAfter *config.Snapshot, name string) admission.Warnings {
	if snapBefore == nil || snapAfter == nil {
		return nil
	}
	old, ok1 := snapBefore.Pool(name)
	now, ok2 := snapAfter.Pool(name)
	if !ok1 || !ok2 || now.Covers(old) {
		return nil
	}
	for i := range before.Pools {
		p := &before.Pools[i]
		if p.Name == name && p.Status.AssignedIPv4+p.Status.AssignedIPv6 > 0 {
			return admission.Warnings{fmt.Sprintf("%s %s/%s: this change removes addresses while %d are assigned: Services holding a removed address get another one or stay pending (ClearAssignment events)",
				config.KindIPAddressPool, p.Namespace, p.Name, p.Status.AssignedIPv4+p.Status.AssignedIPv6)}
		}
	}
	return nil
}

// newDangling returns the transient problems (references to objects that do
// not exist) present after the change but not before.
func (r *Reviewer) newDangling(before, after config.Resources) []string {
	opts := config.Options{Namespace: r.namespace}
	_, errBefore := config.Build(before, opts)
	_, errAfter := config.Build(after, opts)
	_, trBefore := config.Split(errBefore)
	_, trAfter := config.Split(errAfter)
	old := map[string]bool{}
	for _, e := range trBefore {
		old[e.Error()] = true
	}
	var out []string
	for _, e := range trAfter {
		if !old[e.Error()] {
			out = append(out, e.Error())
		}
	}
	return out
}

// newWarnings returns the warnings of after that are about the object under
// review (prefix self) or that before did not have.
func newWarnings(before, after *config.Snapshot, self string) admission.Warnings {
	if after == nil {
		return nil
	}
	old := map[string]bool{}
	if before != nil {
		for _, w := range before.Warnings() {
			old[w] = true
		}
	}
	var out admission.Warnings
	for _, w := range after.Warnings() {
		if strings.HasPrefix(w, self+":") || !old[w] {
			out = append(out, w)
		}
	}
	return out
}

func listSome(errs []string) string {
	if len(errs) <= maxListed {
		return strings.Join(errs, "; ")
	}
	return strings.Join(errs[:maxListed], "; ") + fmt.Sprintf("; and %d more (see ConfigurationState)", len(errs)-maxListed)
}

// namespaceTerminating reports whether Herald's namespace is being deleted:
// then the namespace controller removes every object in some order, and
// refusing a DELETE for a reference that is about to go away too would only
// slow the teardown down. A namespace that does not exist is not
// terminating; any other read error is returned.
func (r *Reviewer) namespaceTerminating(ctx context.Context) (bool, error) {
	var ns corev1.Namespace
	switch err := r.reader.Get(ctx, client.ObjectKey{Name: r.namespace}, &ns); {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read Namespace %s: %w", r.namespace, err)
	}
	return ns.DeletionTimestamp != nil, nil
}

// cloneResources copies the slices (not the objects: Apply replaces whole
// elements and Build does not modify its input).
func cloneResources(r config.Resources) config.Resources {
	return config.Resources{
		Pools:             slices.Clone(r.Pools),
		L2Advertisements:  slices.Clone(r.L2Advertisements),
		BGPAdvertisements: slices.Clone(r.BGPAdvertisements),
		Peers:             slices.Clone(r.Peers),
		Communities:       slices.Clone(r.Communities),
		BFDProfiles:       slices.Clone(r.BFDProfiles),
		Secrets:           slices.Clone(r.Secrets),
		Nodes:             slices.Clone(r.Nodes),
	}
}

// put replaces the element of items with obj's name, or appends obj.
func put[T any, PT interface {
	*T
	client.Object
}](items []T, obj PT) []T {
	for i := range items {
		if PT(&items[i]).GetName() == obj.GetName() {
			items[i] = *obj
			return items
		}
	}
	return append(items, *obj)
}

// remove drops the element of items called name.
func remove[T any, PT interface {
	*T
	client.Object
}](items []T, name string) []T {
	return slices.DeleteFunc(items, func(e T) bool { return PT(&e).GetName() == name })
}
