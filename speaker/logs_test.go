package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/herald-lb/herald/internal/logging"
	"github.com/herald-lb/herald/internal/version"
)

// checkLogs checks the speaker's output against the log rule of
// internal/logging: every line is a JSON object naming the component and
// the node exactly once (also klog's and controller-runtime's lines), and
// the first line says the speaker starts, with its version.
func checkLogs(t *testing.T, out, node string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i, line := range lines {
		keys, rec, err := topLevelKeys(line)
		if err != nil {
			t.Errorf("line %d is not a JSON object (%v): %s", i+1, err, line)
			continue
		}
		for _, k := range []string{logging.KeyComponent, logging.KeyNode} {
			if keys[k] != 1 {
				t.Errorf("line %d has %s %d times, want once: %s", i+1, k, keys[k], line)
			}
		}
		if rec[logging.KeyComponent] != "speaker" || rec[logging.KeyNode] != node {
			t.Errorf("line %d: component %v node %v, want speaker and %s: %s", i+1, rec[logging.KeyComponent], rec[logging.KeyNode], node, line)
		}
		if i == 0 && (rec["msg"] != "starting" || rec["version"] != version.String()) {
			t.Errorf("first line %s, want msg starting with version %q", line, version.String())
		}
	}
}

// topLevelKeys decodes one JSON object, counting each of its keys (a
// duplicate key is legal JSON, so json.Unmarshal alone would hide it).
func topLevelKeys(line string) (map[string]int, map[string]any, error) {
	var rec map[string]any
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		return nil, nil, err
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(line)))
	if _, err := dec.Token(); err != nil { // {
		return nil, nil, err
	}
	keys := map[string]int{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		k, ok := tok.(string)
		if !ok {
			return nil, nil, fmt.Errorf("key %v", tok)
		}
		keys[k]++
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, nil, err
		}
	}
	return keys, rec, nil
}

func TestTopLevelKeys(t *testing.T) {
	keys, _, err := topLevelKeys(`{"msg":"x","node":"n1","nested":{"node":"n2"},"node":"n1"}`)
	if err != nil {
		t.Fatal(err)
	}
	if keys["node"] != 2 || keys["msg"] != 1 || keys["nested"] != 1 {
		t.Errorf("keys %v, want node twice (the nested one not counted)", keys)
	}
}
