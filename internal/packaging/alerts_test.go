package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// alertTests feeds series to the chart's alerts and states which alerts
// fire with which labels and annotations (promtool test rules format).
// Pool "full" has every address in use, "busy" 9 of 10, "mid" 8 of 10,
// "low" 1 of 10 and "empty" no addresses at all; pool "ignored" is full
// but excluded in the second run.
const alertTests = `
evaluation_interval: 30s
tests:
- interval: 30s
  input_series:
  - series: 'metallb_k8s_client_config_stale_bool{pod="herald-speaker-a",instance="198.51.100.11:9120"}'
    values: '0 0 1x10'
  - series: 'metallb_k8s_client_config_stale_bool{pod="herald-controller-x",instance="198.51.100.254:9120"}'
    values: '0x12'
  - series: 'metallb_k8s_client_config_loaded_bool{pod="herald-speaker-a",instance="198.51.100.11:9120"}'
    values: '0x12'
  - series: 'metallb_k8s_client_config_loaded_bool{pod="herald-controller-x",instance="198.51.100.254:9120"}'
    values: '1x12'
  - series: 'metallb_allocator_addresses_total{pool="full",pod="herald-controller-x"}'
    values: '4x12'
  - series: 'metallb_allocator_addresses_in_use_total{pool="full",pod="herald-controller-x"}'
    values: '4x12'
  - series: 'metallb_allocator_addresses_total{pool="busy",pod="herald-controller-x"}'
    values: '10x12'
  - series: 'metallb_allocator_addresses_in_use_total{pool="busy",pod="herald-controller-x"}'
    values: '9x12'
  - series: 'metallb_allocator_addresses_total{pool="mid",pod="herald-controller-x"}'
    values: '10x12'
  - series: 'metallb_allocator_addresses_in_use_total{pool="mid",pod="herald-controller-x"}'
    values: '8x12'
  - series: 'metallb_allocator_addresses_total{pool="low",pod="herald-controller-x"}'
    values: '10x12'
  - series: 'metallb_allocator_addresses_in_use_total{pool="low",pod="herald-controller-x"}'
    values: '1x12'
  - series: 'metallb_allocator_addresses_total{pool="empty",pod="herald-controller-x"}'
    values: '0x12'
  - series: 'metallb_allocator_addresses_in_use_total{pool="empty",pod="herald-controller-x"}'
    values: '0x12'
  - series: 'metallb_allocator_addresses_total{pool="ignored",pod="herald-controller-x"}'
    values: '2x12'
  - series: 'metallb_allocator_addresses_in_use_total{pool="ignored",pod="herald-controller-x"}'
    values: '2x12'
  - series: 'metallb_bgp_session_up{peer="198.51.100.1:179",pod="herald-speaker-a",instance="198.51.100.11:9120"}'
    values: '1 1 0x10'
  - series: 'metallb_bgp_session_up{peer="198.51.100.1:179",pod="herald-speaker-b",instance="198.51.100.12:9120"}'
    values: '1x12'
  # Herald's own alerts: two pending Services (reported by both controller
  # replicas), 198.51.100.200 announced by two nodes (198.51.100.201 by one
  # node for two Services: fine), and 198.51.100.202 answered by another
  # host 2 packets a minute (over 10 in 10 minutes) while 198.51.100.203
  # sees one stray packet.
  - series: 'herald_services_pending{pod="herald-controller-x"}'
    values: '0 2x11'
  - series: 'herald_services_pending{pod="herald-controller-y"}'
    values: '0 2x11'
  - series: 'metallb_speaker_announced{protocol="layer2",ip="198.51.100.200",node="node-a",service="demo/web"}'
    values: '1x12'
  - series: 'metallb_speaker_announced{protocol="layer2",ip="198.51.100.200",node="node-b",service="demo/web"}'
    values: '_ 1x11'
  - series: 'metallb_speaker_announced{protocol="layer2",ip="198.51.100.201",node="node-a",service="demo/a"}'
    values: '1x12'
  - series: 'metallb_speaker_announced{protocol="layer2",ip="198.51.100.201",node="node-a",service="demo/b"}'
    values: '1x12'
  - series: 'herald_layer2_conflicts_total{ip="198.51.100.202",interface="eth0",pod="herald-speaker-a"}'
    values: '0+1x24'
  - series: 'herald_layer2_conflicts_total{ip="198.51.100.203",interface="eth0",pod="herald-speaker-a"}'
    values: '0 1x23'
  # Three speakers in memberlist: a and b see all three, c is cut off and
  # sees only itself; b briefly (2 minutes) saw two.
  - series: 'herald_memberlist_members{pod="herald-speaker-a",instance="198.51.100.11:9120"}'
    values: '3x12'
  - series: 'herald_memberlist_members{pod="herald-speaker-b",instance="198.51.100.12:9120"}'
    values: '3 2x4 3x7'
  - series: 'herald_memberlist_members{pod="herald-speaker-c",instance="198.51.100.13:9120"}'
    values: '1x12'
  alert_rule_test:
  # Not yet: the condition holds for less than the 1m "for".
  - eval_time: 1m
    alertname: MetalLBStaleConfig
    exp_alerts: []
  - eval_time: 2m
    alertname: MetalLBStaleConfig
    exp_alerts:
    - exp_labels: {severity: warning, pod: herald-speaker-a, instance: "198.51.100.11:9120"}
      exp_annotations:
        summary: Herald herald-speaker-a runs a stale configuration.
        description: herald-speaker-a (198.51.100.11:9120) rejected the current metallb.io configuration and keeps using the last valid one; see its ConfigurationState and logs.
  - eval_time: 2m
    alertname: MetalLBConfigNotLoaded
    exp_alerts:
    - exp_labels: {severity: warning, pod: herald-speaker-a, instance: "198.51.100.11:9120"}
      exp_annotations:
        summary: Herald herald-speaker-a has not loaded a configuration.
        description: herald-speaker-a (198.51.100.11:9120) has not loaded any valid metallb.io configuration yet and announces nothing.
  - eval_time: 2m
    alertname: MetalLBAddressPoolExhausted
    exp_alerts:
    - exp_labels: {severity: critical, pool: full}
      exp_annotations:
        summary: Address pool full is exhausted.
        description: Every address of pool full is allocated; new LoadBalancer Services that need it stay pending.
    - exp_labels: {severity: critical, pool: ignored}
      exp_annotations:
        summary: Address pool ignored is exhausted.
        description: Every address of pool ignored is allocated; new LoadBalancer Services that need it stay pending.
  - eval_time: 2m
    alertname: MetalLBAddressPoolUsage75Percent
    exp_alerts:
    - exp_labels: {severity: warning, pool: full}
      exp_annotations: {summary: Address pool full is more than 75% used., description: Pool full has 100% of its addresses allocated.}
    - exp_labels: {severity: warning, pool: busy}
      exp_annotations: {summary: Address pool busy is more than 75% used., description: Pool busy has 90% of its addresses allocated.}
    - exp_labels: {severity: warning, pool: mid}
      exp_annotations: {summary: Address pool mid is more than 75% used., description: Pool mid has 80% of its addresses allocated.}
    - exp_labels: {severity: warning, pool: ignored}
      exp_annotations: {summary: Address pool ignored is more than 75% used., description: Pool ignored has 100% of its addresses allocated.}
  - eval_time: 2m
    alertname: MetalLBAddressPoolUsage85Percent
    exp_alerts:
    - exp_labels: {severity: warning, pool: full}
      exp_annotations: {summary: Address pool full is more than 85% used., description: Pool full has 100% of its addresses allocated.}
    - exp_labels: {severity: warning, pool: busy}
      exp_annotations: {summary: Address pool busy is more than 85% used., description: Pool busy has 90% of its addresses allocated.}
    - exp_labels: {severity: warning, pool: ignored}
      exp_annotations: {summary: Address pool ignored is more than 85% used., description: Pool ignored has 100% of its addresses allocated.}
  - eval_time: 2m
    alertname: MetalLBAddressPoolUsage95Percent
    exp_alerts:
    - exp_labels: {severity: critical, pool: full}
      exp_annotations: {summary: Address pool full is more than 95% used., description: Pool full has 100% of its addresses allocated.}
    - exp_labels: {severity: critical, pool: ignored}
      exp_annotations: {summary: Address pool ignored is more than 95% used., description: Pool ignored has 100% of its addresses allocated.}
  - eval_time: 2m
    alertname: MetalLBBGPSessionDown
    exp_alerts:
    - exp_labels: {severity: critical, peer: "198.51.100.1:179", pod: herald-speaker-a, instance: "198.51.100.11:9120"}
      exp_annotations:
        summary: BGP session to 198.51.100.1:179 is down.
        description: The BGP session from herald-speaker-a (198.51.100.11:9120) to peer 198.51.100.1:179 has been down; Services are not announced to it.
  - eval_time: 4m
    alertname: HeraldServicesPending
    exp_alerts: []
  - eval_time: 6m
    alertname: HeraldServicesPending
    exp_alerts:
    - exp_labels: {severity: warning}
      exp_annotations:
        summary: 2 LoadBalancer Services have no address.
        description: 2 LoadBalancer Services wait for an address; their condition herald.io/IPAllocated (kubectl get svc -o yaml) and AllocationFailed events say why.
  - eval_time: 2m
    alertname: HeraldLayer2MultipleAnnouncers
    exp_alerts:
    - exp_labels: {severity: critical, ip: 198.51.100.200}
      exp_annotations:
        summary: Layer 2 address 198.51.100.200 is announced by 2 nodes.
        description: '2 speakers announce 198.51.100.200 in layer 2 at once (split brain: memberlist partition, or MetalLB and Herald speakers that do not gossip); clients may reach any of them.'
  - eval_time: 4m
    alertname: HeraldMemberlistMembersMissing
    exp_alerts: []
  - eval_time: 6m
    alertname: HeraldMemberlistMembersMissing
    exp_alerts:
    - exp_labels: {severity: warning, pod: herald-speaker-c, instance: "198.51.100.13:9120"}
      exp_annotations:
        summary: Speaker herald-speaker-c sees only 1 memberlist members.
        description: 'herald-speaker-c (198.51.100.13:9120) sees 1 speakers alive in memberlist, fewer than the speakers that report herald_memberlist_members: a network partition or a speaker that cannot join (TCP and UDP port 7946, the memberlist key). Layer 2 elections disagree, so an address may have two announcers or none; see docs/troubleshooting.md.'
  - eval_time: 11m
    alertname: HeraldLayer2AddressConflict
    exp_alerts:
    - exp_labels: {severity: warning, ip: 198.51.100.202}
      exp_annotations:
        summary: Another host answers for layer 2 address 198.51.100.202.
        description: 'A host that is not the announcing node keeps answering ARP/NDP for 198.51.100.202 (20 packets in 10 minutes); see docs/reliability.md, "Two nodes answering for one address".'
`

// excludedTests: with excludePools "ignored|other" the pool alerts skip
// pool "ignored".
const excludedTests = `
evaluation_interval: 30s
tests:
- interval: 30s
  input_series:
  - series: 'metallb_allocator_addresses_total{pool="full"}'
    values: '4x12'
  - series: 'metallb_allocator_addresses_in_use_total{pool="full"}'
    values: '4x12'
  - series: 'metallb_allocator_addresses_total{pool="ignored"}'
    values: '2x12'
  - series: 'metallb_allocator_addresses_in_use_total{pool="ignored"}'
    values: '2x12'
  alert_rule_test:
  - eval_time: 2m
    alertname: MetalLBAddressPoolExhausted
    exp_alerts:
    - exp_labels: {severity: critical, pool: full}
      exp_annotations:
        summary: Address pool full is exhausted.
        description: Every address of pool full is allocated; new LoadBalancer Services that need it stay pending.
  - eval_time: 2m
    alertname: MetalLBAddressPoolUsage95Percent
    exp_alerts:
    - exp_labels: {severity: critical, pool: full}
      exp_annotations: {summary: Address pool full is more than 95% used., description: Pool full has 100% of its addresses allocated.}
`

// TestPrometheusRules checks the chart's PrometheusRule with promtool: the
// rules are valid, and each alert fires exactly for the series it is
// documented for.
func TestPrometheusRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (make deps installs Debian's prometheus): %v", err)
	}
	for _, tc := range []struct {
		name  string
		sets  []string
		tests string
	}{
		{"defaults", nil, alertTests},
		{"excludePools", []string{"metrics.prometheusRule.excludePools=ignored|other"}, excludedTests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sets := append([]string{"metrics.prometheusRule.enabled=true"}, tc.sets...)
			objs := parseObjects(t, helmTemplate(t, "herald", ns, sets...))
			var rule struct {
				Spec struct {
					Groups []any `json:"groups"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal(find(t, objs, "PrometheusRule", ns, "herald").Raw, &rule); err != nil {
				t.Fatal(err)
			}
			rules, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
				t.Fatal(err)
			}
			run(t, dir, nil, nil, promtool, "check", "rules", "rules.yaml")
			var tests map[string]any
			if err := yaml.Unmarshal([]byte(tc.tests), &tests); err != nil {
				t.Fatal(err)
			}
			tests["rule_files"] = []string{"rules.yaml"}
			b, err := yaml.Marshal(tests)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			run(t, dir, nil, nil, promtool, "test", "rules", "tests.yaml")
		})
	}
}
