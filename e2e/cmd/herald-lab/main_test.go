package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestParseNode(t *testing.T) {
	for _, c := range []struct {
		args     []string
		node     string
		kill     bool
		errParts string
	}{
		{[]string{"n2"}, "n2", false, ""},
		{[]string{"--kill", "n2"}, "n2", true, ""},
		{[]string{"n2", "--kill"}, "n2", true, ""},
		{[]string{"--state-dir", "/x", "n1", "--kill"}, "n1", true, ""},
		{nil, "", false, "want a node name"},
		{[]string{"--kill"}, "", false, "want a node name"},
		{[]string{"n1", "n2"}, "", false, `got "n1" and "n2"`},
		{[]string{"n1", "--nope"}, "", false, "not defined"},
	} {
		fs := flag.NewFlagSet("restart-speaker", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.String("state-dir", "", "")
		kill := fs.Bool("kill", false, "")
		node, err := parseNode(fs, c.args)
		if c.errParts != "" {
			if err == nil || !strings.Contains(err.Error(), c.errParts) {
				t.Errorf("%q: error %v, want one containing %q", c.args, err, c.errParts)
			}
			continue
		}
		if err != nil || node != c.node || *kill != c.kill {
			t.Errorf("%q: node %q kill %v err %v; want %q %v", c.args, node, *kill, err, c.node, c.kill)
		}
	}
}
