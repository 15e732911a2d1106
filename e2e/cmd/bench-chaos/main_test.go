package main

import "testing"

func TestScenarioTitles(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range scenarioNames {
		title := scenarioTitles[s]
		if title == "" || seen[title] {
			t.Errorf("scenario %q: title %q missing or not unique", s, title)
		}
		seen[title] = true
	}
	if len(scenarioTitles) != len(scenarioNames) {
		t.Errorf("%d titles for %d scenarios", len(scenarioTitles), len(scenarioNames))
	}
}

func TestAllScenarios(t *testing.T) {
	if !allScenarios(scenarioNames) {
		t.Error("every scenario: want true")
	}
	if allScenarios(scenarioNames[1:]) {
		t.Error("all but the first: want false")
	}
	if allScenarios([]string{"rollout"}) {
		t.Error("one: want false")
	}
}
