package packaging

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestChartBalancedElection: layer2.election=balanced adds exactly
// --l2-election=balanced to the speaker's arguments (the default renders no
// --l2-election), and is refused with speaker.memberlist.keyDerivation=metallb,
// which implies MetalLB's election.
func TestChartBalancedElection(t *testing.T) {
	var def, bal appsv1.DaemonSet
	find(t, parseObjects(t, helmTemplateArgs(t, "herald", "herald-system")), "DaemonSet", "herald-system", "herald-speaker").into(t, &def)
	find(t, parseObjects(t, helmTemplateArgs(t, "herald", "herald-system", "--set", "layer2.election=balanced")), "DaemonSet", "herald-system", "herald-speaker").into(t, &bal)
	dc := container(t, def.Spec.Template.Spec, "speaker")
	if strings.Contains(strings.Join(dc.Args, " "), "--l2-election") {
		t.Errorf("default args %v name --l2-election", dc.Args)
	}
	sameJSON(t, "--set layer2.election=balanced", container(t, bal.Spec.Template.Spec, "speaker").Args, append(append([]string{}, dc.Args...), "--l2-election=balanced"))
	if out, ok := helmTemplateErr(t, "--set", "layer2.election=balanced", "--set", "speaker.memberlist.keyDerivation=metallb"); ok || !strings.Contains(out, "layer2.election: balanced") {
		t.Errorf("balanced with keyDerivation metallb: installed %t, want a refusal:\n%s", ok, out)
	}
}
