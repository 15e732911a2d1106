package allocation

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/herald-lb/herald/internal/annotations"
	"github.com/herald-lb/herald/internal/poll"
	"github.com/herald-lb/herald/internal/testenv"
)

// A replica that read an old copy of a Service (or lost its leadership
// without noticing yet) cannot overwrite a newer status: its write carries
// the resourceVersion it read and the API server refuses it; the replica
// then re-reads what the status shows (issue 11 item 3).
func TestStaleWriterRefused(t *testing.T) {
	f := newFixture(t)
	f.pool("pool-a", []string{"198.51.100.0/28"})
	r := f.start()
	f.svc("a")
	stale := f.waitIPs("a", "198.51.100.0")
	r.stop() // its allocator still holds a -> 198.51.100.0

	// A newer writer (the new leader) gives a another address. It starts
	// from the Service as stored now: the controller may have written it
	// again after the address appeared (the pool annotation, a condition),
	// so the copy the test waited for can itself be behind.
	newer := f.get("a").DeepCopy()
	newer.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.7", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
	if err := f.c.Status().Update(f.ctx(), newer); err != nil {
		t.Fatal(err)
	}

	// The controller may have had conflicts of its own before it stopped
	// (a write from a cache that was behind its previous write is refused
	// and re-decided, by design): count only the stale write's.
	before, _ := gauge(t, r.reg, "herald_service_status_write_errors_total", "reason", "Conflict")
	t.Logf("the controller's own refused writes before it stopped: %v", before)
	cond := desiredCondition(stale, true, ReasonAllocated, "stale")
	err := r.ctrl.patchStatus(f.ctx(), stale, []netip.Addr{netip.MustParseAddr("198.51.100.0")}, &cond)
	if !apierrors.IsConflict(err) {
		t.Fatalf("stale status write: got %v, want a Conflict", err)
	}
	if got := ingressStrings(f.get("a")); !slices.Equal(got, []string{"198.51.100.7"}) {
		t.Errorf("the stale write overwrote the newer status: %v", got)
	}
	// Re-read: the allocator now knows what the status shows, and dropped
	// the decision it could not write.
	if got := r.ctrl.alloc.Shown(Key(stale)); !slices.Equal(got, []netip.Addr{netip.MustParseAddr("198.51.100.7")}) {
		t.Errorf("after the conflict the controller records %v as shown, want 198.51.100.7", got)
	}
	if asg, _ := r.ctrl.alloc.Lookup(Key(stale)); len(asg.IPs) != 0 {
		t.Errorf("after the conflict the controller still holds %v for a", asg.IPs)
	}
	if v, _ := gauge(t, r.reg, "herald_service_status_write_errors_total", "reason", "Conflict"); v != before+1 {
		t.Errorf("herald_service_status_write_errors_total{reason=Conflict} = %v after the stale write, want %v (one more)", v, before+1)
	}

	// The annotation write carries the same precondition.
	ann := stale.DeepCopy()
	ann.Annotations = map[string]string{annotations.AllocatedFromPool: "x"}
	body := []byte(fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"annotations":{%q:"pool-a"}}}`, stale.ResourceVersion, annotations.AllocatedFromPool))
	err = f.c.Status().Patch(f.ctx(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "a"}}, client.RawPatch(types.MergePatchType, body))
	if !apierrors.IsConflict(err) {
		t.Errorf("annotation patch at a stale resourceVersion: got %v, want a Conflict", err)
	}
}

// freezeStatus makes the API server refuse every status write to Services
// of namespace ns that carry the label test.herald.io/freeze-status, with a
// ValidatingAdmissionPolicy (admission in the API server itself, no mock).
// It returns a function that lifts the policy.
func (f *fixture) freezeStatus(ns string) func() {
	f.t.Helper()
	name := "freeze-status-" + ns
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
						Rule: admissionregistrationv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"services/status"},
						},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "!has(object.metadata.labels) || !('test.herald.io/freeze-status' in object.metadata.labels)",
				Message:    "status frozen by the test",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			},
		},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := f.c.Create(f.ctx(), o); err != nil {
			f.t.Fatalf("create %T: %v", o, err)
		}
	}
	lift := func() {
		for _, o := range []client.Object{binding, policy} {
			if err := f.c.Delete(f.ctx(), o); err != nil && !apierrors.IsNotFound(err) {
				f.t.Errorf("delete %T: %v", o, err)
			}
		}
	}
	f.t.Cleanup(lift)
	// Wait until the policy is in force: a probe's status write is refused.
	probe := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "freeze-probe", Labels: map[string]string{"test.herald.io/freeze-status": "1"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 1}}},
	}
	if err := f.c.Create(f.ctx(), probe); err != nil {
		f.t.Fatal(err)
	}
	poll.Until(f.t, 30*time.Second, "the freeze policy in force", func() error {
		body := []byte(fmt.Sprintf(`{"status":{"conditions":[{"type":"probe","status":"True","reason":"Probe","message":"","lastTransitionTime":%q}]}}`, time.Now().UTC().Format(time.RFC3339)))
		err := f.c.Status().Patch(f.ctx(), probe.DeepCopy(), client.RawPatch(types.StrategicMergePatchType, body))
		if err == nil {
			return errors.New("the probe's status patch went through")
		}
		if !strings.Contains(err.Error(), "status frozen") {
			return err
		}
		return nil
	})
	return lift
}

// An address taken from Service a goes to no other Service while the write
// clearing it from a's status fails (here an admission policy refuses it):
// clients may still be sent to it. Once the write succeeds, the waiting
// Service gets it (issue 11 item 3).
func TestFreedAddressHeldWhileClearingWriteFails(t *testing.T) {
	f := newFixture(t)
	f.pool("pool-a", []string{"198.51.100.0/32"})
	r := f.start()
	f.svc("a")
	f.waitIPs("a", "198.51.100.0")
	lift := f.freezeStatus(f.ns)

	// a loses its address: it now asks for a pool that does not exist.
	a := f.get("a")
	a.Labels = map[string]string{"test.herald.io/freeze-status": "1"}
	a.Annotations = map[string]string{annotations.AddressPool: "missing"}
	if err := f.c.Update(f.ctx(), a); err != nil {
		t.Fatal(err)
	}
	f.waitEvent("a", EventStatusWriteFailed, "status frozen")

	f.svc("b")
	var seen string
	poll.Until(t, 30*time.Second, "b's condition", func() error {
		for _, c := range f.get("b").Status.Conditions {
			if c.Type == ConditionType {
				seen = c.Reason + ": " + c.Message
				return nil
			}
		}
		return errors.New("no condition")
	})
	if got := f.listIPs(); got["b"] != "" || got["a"] != "198.51.100.0" {
		t.Fatalf("while a's clearing write fails: addresses %v (b: %s); want a still showing 198.51.100.0 and b none", got, seen)
	}
	if !strings.Contains(seen, ReasonPoolExhausted) || !strings.Contains(seen, Key(a)) {
		t.Errorf("b's condition %q does not say the address waits for %s", seen, Key(a))
	}
	if v, _ := gauge(t, r.reg, "herald_service_status_write_errors_total", "reason", "Invalid"); v < 1 {
		t.Errorf("refused writes not counted: %v", v)
	}

	lift()
	f.waitIPs("a")
	f.waitIPs("b", "198.51.100.0")
	checkNoDuplicates(t, f.listIPs())
}

// rbacObjects reads the controller's ClusterRole and Role from
// manifests/base/rbac-controller.yaml.
func rbacObjects(t *testing.T) (*rbacv1.ClusterRole, *rbacv1.Role) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "manifests", "base", "rbac-controller.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cr *rbacv1.ClusterRole
	var role *rbacv1.Role
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ClusterRole":
			cr = &rbacv1.ClusterRole{}
			if err := utilyaml.Unmarshal([]byte(doc), cr); err != nil {
				t.Fatal(err)
			}
		case "Role":
			role = &rbacv1.Role{}
			if err := utilyaml.Unmarshal([]byte(doc), role); err != nil {
				t.Fatal(err)
			}
		}
	}
	if cr == nil || role == nil {
		t.Fatal("rbac-controller.yaml lacks the ClusterRole or the Role")
	}
	return cr, role
}

// The controller does its whole job (addresses, condition, pool
// annotation, pool counters, ConfigurationState, events) as a
// ServiceAccount holding exactly the manifests' RBAC, which grants no
// write on Services themselves (issue 11 item 6).
func TestControllerWorksWithManifestRBAC(t *testing.T) {
	f := newFixture(t)
	cr, role := rbacObjects(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.herald, Name: "herald-controller"}}
	cr.Name = "herald-controller-" + f.herald
	role.Namespace = f.herald
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: f.herald}}
	objs := []client.Object{sa, cr, role,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cr.Name}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: f.herald, Name: role.Name}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}},
	}
	for _, o := range objs {
		if err := f.c.Create(f.ctx(), o); err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
	}
	t.Cleanup(func() {
		for _, o := range objs[1:3] {
			_ = f.c.Delete(f.ctx(), o)
		}
		_ = f.c.Delete(f.ctx(), objs[3])
	})
	cfg := rest.CopyConfig(srv.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + f.herald + ":" + sa.Name,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + f.herald, "system:authenticated"},
	}
	f.pool("pool-a", []string{"198.51.100.0/28"})
	r := f.startAs(cfg)
	f.svc("a")
	f.waitIPs("a", "198.51.100.0")
	poll.Until(t, 30*time.Second, "pool annotation on a", func() error {
		v := f.get("a").Annotations[annotations.AllocatedFromPool]
		if v != "pool-a" {
			return fmt.Errorf("annotation %q", v)
		}
		return nil
	})
	f.waitEvent("a", EventIPAllocated, "198.51.100.0")
	f.waitConfigState("Valid")
	// Released and re-addressed: the annotation is removed too.
	a := f.get("a")
	a.Spec.Type = corev1.ServiceTypeClusterIP
	if err := f.c.Update(f.ctx(), a); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "a cleared", func() error {
		s := f.get("a")
		_, has := s.Annotations[annotations.AllocatedFromPool]
		if len(s.Status.LoadBalancer.Ingress) > 0 || has {
			return fmt.Errorf("%v %v", ingressStrings(s), s.Annotations)
		}
		return nil
	})
	for _, reason := range []string{"Forbidden", "Invalid", "Unknown"} {
		if v, _ := gauge(t, r.reg, "herald_service_status_write_errors_total", "reason", reason); v != 0 {
			t.Errorf("%v status writes refused with %s", v, reason)
		}
	}
}
