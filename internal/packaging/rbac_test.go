package packaging

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// grant is one permission: verb on group/resource (optionally one
// resourceName) in scope ("cluster" or a namespace).
type grant struct {
	scope, group, resource, name, verb string
}

func (g grant) String() string {
	r := g.resource
	if g.group != "" {
		r += "." + g.group
	}
	if g.name != "" {
		r += "/" + g.name
	}
	return fmt.Sprintf("%s %s in %s", g.verb, r, g.scope)
}

// grants expands rules into single permissions.
func grants(t *testing.T, scope string, rules []rbacv1.PolicyRule) map[grant]bool {
	t.Helper()
	out := map[grant]bool{}
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			for _, u := range r.NonResourceURLs {
				for _, v := range r.Verbs {
					out[grant{scope: scope, resource: "url:" + u, verb: v}] = true
				}
			}
			continue
		}
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, n := range names {
					for _, v := range r.Verbs {
						if g == "*" || res == "*" || v == "*" {
							t.Errorf("wildcard in rule %+v", r)
						}
						out[grant{scope, g, res, n, v}] = true
					}
				}
			}
		}
	}
	return out
}

// expand builds the expected grants: each entry is "verbs group resources
// [names]" with comma-separated lists ("-" = no names).
func expand(scope string, lines ...string) map[grant]bool {
	out := map[grant]bool{}
	for _, l := range lines {
		f := strings.Fields(l)
		group := f[1]
		if group == "core" {
			group = ""
		}
		names := []string{""}
		if len(f) > 3 {
			names = strings.Split(f[3], ",")
		}
		for _, v := range strings.Split(f[0], ",") {
			for _, res := range strings.Split(f[2], ",") {
				for _, n := range names {
					out[grant{scope, group, res, n, v}] = true
				}
			}
		}
	}
	return out
}

const configCRs = "ipaddresspools,bgppeers,bgpadvertisements,l2advertisements,communities,bfdprofiles"

// wantRBAC is the complete list of what each ServiceAccount may do
// (issue 7): anything granted beyond it, or missing, fails the test.
func wantRBAC(namespace, prefix string) map[string]map[grant]bool {
	merge := func(ms ...map[grant]bool) map[grant]bool {
		out := map[grant]bool{}
		for _, m := range ms {
			for g := range m {
				out[g] = true
			}
		}
		return out
	}
	return map[string]map[grant]bool{
		prefix + "controller": merge(
			expand("cluster",
				"get,list,watch core services", // annotation through services/status (issue 11 item 6)
				"update,patch core services/status",
				"get,list,watch core namespaces,nodes",
				"create,patch core events",
				"get,list,watch admissionregistration.k8s.io validatingwebhookconfigurations",
				"update,patch admissionregistration.k8s.io validatingwebhookconfigurations "+prefix+"webhook-configuration",
				"get,list,watch apiextensions.k8s.io customresourcedefinitions",
				"update,patch apiextensions.k8s.io customresourcedefinitions bgppeers.metallb.io",
				"create authentication.k8s.io tokenreviews",
				"create authorization.k8s.io subjectaccessreviews",
			),
			expand(namespace,
				"get,list,watch metallb.io "+configCRs,
				"update,patch metallb.io ipaddresspools/status",
				"get,list,watch,create,update,patch metallb.io configurationstates,configurationstates/status",
				"get,list,watch,create core secrets",
				"update core secrets "+prefix+"memberlist,"+prefix+"webhook-cert",
				"get,list,watch core pods", // its own; the speakers' (BGPSessionState clean-up, issue 14)
				"list,watch,delete herald.io bgpsessionstates",
				"update herald.io bgpsessionstates/status", // marks a node's sessions Unknown while its speaker is not running
				"get,create,update coordination.k8s.io leases",
			),
		),
		prefix + "speaker": merge(
			expand("cluster",
				"get,list,watch core services,nodes",
				"get,list,watch discovery.k8s.io endpointslices",
				"create,patch core events",
				"create authentication.k8s.io tokenreviews",
				"create authorization.k8s.io subjectaccessreviews",
			),
			expand(namespace,
				"get,list,watch metallb.io "+configCRs,
				"get,list,watch,create,update,patch,delete metallb.io servicel2statuses,servicel2statuses/status,servicebgpstatuses,servicebgpstatuses/status,configurationstates,configurationstates/status",
				"get,list,watch,create,update,patch,delete herald.io bgpsessionstates,bgpsessionstates/status",
				"get,list,watch core secrets",
				"get,list,watch core pods",
			),
		),
	}
}

// boundGrants collects, per ServiceAccount in namespace, the grants of the
// Roles and ClusterRoles bound to it in objs.
func boundGrants(t *testing.T, objs []object, namespace string) map[string]map[grant]bool {
	t.Helper()
	clusterRoles := map[string][]rbacv1.PolicyRule{}
	for _, o := range ofKind(objs, "ClusterRole") {
		var r rbacv1.ClusterRole
		o.into(t, &r)
		clusterRoles[r.Name] = r.Rules
	}
	roles := map[string][]rbacv1.PolicyRule{}
	for _, o := range ofKind(objs, "Role") {
		var r rbacv1.Role
		o.into(t, &r)
		roles[r.Namespace+"/"+r.Name] = r.Rules
	}
	out := map[string]map[grant]bool{}
	add := func(subjects []rbacv1.Subject, scope string, rules []rbacv1.PolicyRule, ok bool, what string) {
		if !ok {
			t.Errorf("binding refers to missing %s", what)
		}
		for _, s := range subjects {
			if s.Kind != "ServiceAccount" || s.Namespace != namespace {
				if s.Kind != "ServiceAccount" {
					t.Errorf("binding of %s to %s %s", what, s.Kind, s.Name)
				}
				continue
			}
			if out[s.Name] == nil {
				out[s.Name] = map[grant]bool{}
			}
			for g := range grants(t, scope, rules) {
				out[s.Name][g] = true
			}
		}
	}
	for _, o := range ofKind(objs, "ClusterRoleBinding") {
		var b rbacv1.ClusterRoleBinding
		o.into(t, &b)
		rules, ok := clusterRoles[b.RoleRef.Name]
		add(b.Subjects, "cluster", rules, ok && b.RoleRef.Kind == "ClusterRole", "ClusterRole "+b.RoleRef.Name)
	}
	for _, o := range ofKind(objs, "RoleBinding") {
		var b rbacv1.RoleBinding
		o.into(t, &b)
		var rules []rbacv1.PolicyRule
		var ok bool
		if b.RoleRef.Kind == "ClusterRole" {
			rules, ok = clusterRoles[b.RoleRef.Name]
		} else {
			rules, ok = roles[b.Namespace+"/"+b.RoleRef.Name]
		}
		add(b.Subjects, b.Namespace, rules, ok, b.RoleRef.Kind+" "+b.RoleRef.Name)
	}
	return out
}

func diffGrants(t *testing.T, who string, got, want map[grant]bool) {
	t.Helper()
	var extra, missing []string
	for g := range got {
		if !want[g] {
			extra = append(extra, g.String())
		}
	}
	for g := range want {
		if !got[g] {
			missing = append(missing, g.String())
		}
	}
	sort.Strings(extra)
	sort.Strings(missing)
	if len(extra) > 0 {
		t.Errorf("%s may do more than documented:\n  %s", who, strings.Join(extra, "\n  "))
	}
	if len(missing) > 0 {
		t.Errorf("%s lacks documented permissions:\n  %s", who, strings.Join(missing, "\n  "))
	}
}

// TestManifestRBAC: in manifests/herald.yaml, the controller and speaker
// ServiceAccounts get exactly the documented permissions, and no other
// ServiceAccount gets any.
func TestManifestRBAC(t *testing.T) {
	got := boundGrants(t, heraldYAML(t), ns)
	want := wantRBAC(ns, "herald-")
	for sa := range got {
		if want[sa] == nil {
			t.Errorf("ServiceAccount %s is granted permissions", sa)
		}
	}
	for sa, w := range want {
		diffGrants(t, sa, got[sa], w)
	}
}

// TestChartRBAC: the chart grants the same, under its release's names.
func TestChartRBAC(t *testing.T) {
	for _, tc := range []struct{ release, namespace, prefix string }{
		{"herald", ns, "herald-"},
		{"edge", "lb", "edge-herald-"},
	} {
		t.Run(tc.release, func(t *testing.T) {
			objs := parseObjects(t, helmTemplate(t, tc.release, tc.namespace))
			got := boundGrants(t, objs, tc.namespace)
			want := wantRBAC(tc.namespace, tc.prefix)
			for sa := range got {
				if want[sa] == nil {
					t.Errorf("ServiceAccount %s is granted permissions", sa)
				}
			}
			for sa, w := range want {
				diffGrants(t, sa, got[sa], w)
			}
			// No RBAC at all with rbac.create=false.
			for _, o := range parseObjects(t, helmTemplate(t, tc.release, tc.namespace, "rbac.create=false")) {
				if slices.Contains([]string{"ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"}, o.Kind) {
					t.Errorf("rbac.create=false renders %s", o.key())
				}
			}
		})
	}
}
