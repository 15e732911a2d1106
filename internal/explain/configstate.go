package explain

import (
	"fmt"
	"sort"

	"github.com/herald-lb/herald/api/v1beta1"
)

// ConfigReport is kubectl herald config.
type ConfigReport struct {
	// Components: one row per ConfigurationState.
	Components []ComponentRow `json:"components"`
	// Build is the plugin's own config.Build of the objects: "Valid", or
	// the errors (each names the object and field).
	Build    string   `json:"build"`
	Dropped  []string `json:"dropped,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	Notes    []string `json:"notes,omitempty"`
	Problems []string `json:"problems,omitempty"`
}

// ComponentRow is one ConfigurationState.
type ComponentRow struct {
	Object       string   `json:"object"`
	Component    string   `json:"component"`
	Node         string   `json:"node,omitempty"`
	Result       string   `json:"result"`
	ErrorSummary string   `json:"errorSummary,omitempty"`
	Conditions   []string `json:"conditions,omitempty"`
}

// Config reports every component's ConfigurationState and the plugin's
// own build of the configuration.
func Config(c *Cluster) *ConfigReport {
	r := &ConfigReport{}
	seen := map[string]bool{}
	for _, cs := range c.ConfigStates {
		row := ComponentRow{Object: cs.Name, Component: cs.Labels[v1beta1.LabelComponentType], Node: cs.Labels[v1beta1.LabelNodeName],
			Result: string(cs.Status.Result), ErrorSummary: cs.Status.ErrorSummary}
		if row.Result == "" {
			row.Result = string(v1beta1.ConfigurationResultUnknown)
		}
		for _, cond := range cs.Status.Conditions {
			row.Conditions = append(row.Conditions, fmt.Sprintf("%s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message))
		}
		if row.Component == "speaker" && row.Node != "" {
			seen[row.Node] = true
		}
		if row.Result != string(v1beta1.ConfigurationResultValid) {
			msg := row.ErrorSummary
			if msg == "" {
				msg = "no configuration loaded yet"
			}
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %s: %s", row.Object, row.Result, msg))
		}
		r.Components = append(r.Components, row)
	}
	sort.Slice(r.Components, func(i, j int) bool { return r.Components[i].Object < r.Components[j].Object })
	for node := range LiveFromPods(c.SpeakerPods) {
		if !seen[node] {
			r.Problems = append(r.Problems, fmt.Sprintf("the speaker on node %s is Ready but has written no ConfigurationState", node))
		}
	}
	sort.Strings(r.Problems)
	v := newView(c)
	if v.buildErr != nil {
		r.Build = "Invalid"
		r.Problems = append(r.Problems, "the plugin's build of the configuration: "+v.buildErr.Error())
	} else {
		r.Build = "Valid"
		for _, d := range v.snap.Dropped() {
			r.Dropped = append(r.Dropped, d.Error())
		}
		r.Warnings = v.snap.Warnings()
	}
	if c.SecretsUnreadable {
		r.Notes = append(r.Notes, "Secrets are not readable with your credentials: BGPPeer passwords were not checked")
	}
	r.Problems = oneLine(r.Problems)
	return r
}
