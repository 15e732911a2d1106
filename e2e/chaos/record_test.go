package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/herald-lb/herald/e2e/lab"
)

const oldSection = `Old intro.

Measured 2026-12-01 11:35 UTC on vm, 3-node lab.
A hand-written line about the runs.

| scenario | run | measure | value | target | met |
|---|---|---|---|---|---|
| speaker restarts | 20 restarts | false claims | 0 of 240 | 0 | yes |
| speaker restarts | 20 restarts | neighbour entries | 0 of 240 | 0 | yes |
| rolling update of the speakers | 3 rounds | requests lost | 0 of 1392 | reported | yes |
| rolling update of the speakers | 3 rounds + BGP | BGP: requests lost | 0 of 1696 | reported | yes |
| controller kills during a burst | 20 kills | duplicates | 0 | 0 | yes |

speaker restarts:

- restart 1: TERM+start

rolling update of the speakers:

- longest gap on 198.51.100.230
- BGP rows (13:53 run): a hand-written note
  over two lines.

With BGP (13:53 run):

- a hand-written sub-block of the rollout's notes

controller kills during a burst:

- every Service had its address 18.2 s after the last restart
`

// table is what Table writes for results.
func table(results ...Result) string { return Table(results, 3) }

func TestMergeSection(t *testing.T) {
	rollout := Result{Scenario: "rolling update of the speakers", Form: "1 round(s)",
		Rows:  []Row{reportedRow("rolling update of the speakers", "requests lost", 2, 500)},
		Notes: []string{"longest gap on 198.51.100.231"}}
	got, err := MergeSection(oldSection, table(rollout))
	if err != nil {
		t.Fatal(err)
	}
	newMeasured := strings.SplitN(table(rollout), "\n", 2)[0]
	want := `Old intro.

Measured 2026-12-01 11:35 UTC on vm, 3-node lab.
A hand-written line about the runs.

Re-run of "rolling update of the speakers" alone (bench-chaos --scenarios; the rows and notes of the others are kept): ` + newMeasured + `

| scenario | run | measure | value | target | met |
|---|---|---|---|---|---|
| speaker restarts | 20 restarts | false claims | 0 of 240 | 0 | yes |
| speaker restarts | 20 restarts | neighbour entries | 0 of 240 | 0 | yes |
| rolling update of the speakers | 1 round(s) | requests lost | 2 of 500 | reported | yes |
| controller kills during a burst | 20 kills | duplicates | 0 | 0 | yes |

speaker restarts:

- restart 1: TERM+start

rolling update of the speakers:

- longest gap on 198.51.100.231

controller kills during a burst:

- every Service had its address 18.2 s after the last restart
`
	if got != want {
		t.Errorf("merged section:\n%s\nwant:\n%s", got, want)
	}
}

func TestMergeSectionNewScenarioAndNoRows(t *testing.T) {
	flood := Result{Scenario: "a peer sends a full table", Form: "10 prefixes",
		Rows: []Row{countRow("a peer sends a full table", "sessions not torn down", 0, 1)}}
	// A scenario that did not complete: notes, no rows.
	burst := Result{Scenario: "controller kills during a burst", Notes: []string{"did not complete: boom"}}
	// Its old notes have no block in the new table: they go.
	restarts := Result{Scenario: "speaker restarts", Form: "2 restarts",
		Rows: []Row{countRow("speaker restarts", "false claims", 1, 24)}}
	got, err := MergeSection(oldSection, table(restarts, burst, flood))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"Re-run of \"controller kills during a burst\" (did not complete, rows kept), \"speaker restarts\", \"a peer sends a full table\" alone",
		"| speaker restarts | 2 restarts | false claims | 1 of 24 | 0 | **no** |\n| rolling update of the speakers | 3 rounds | requests lost |",
		"| controller kills during a burst | 20 kills | duplicates | 0 | 0 | yes |\n| a peer sends a full table | 10 prefixes | sessions not torn down | 0 of 1 | 0 | yes |\n\nrolling update",
		"- every Service had its address 18.2 s after the last restart\n- did not complete: boom\n",
		"With BGP (13:53 run):\n\n- a hand-written sub-block",
	} {
		if !strings.Contains(got, s) {
			t.Errorf("merged section lacks %q:\n%s", s, got)
		}
	}
	for _, s := range []string{"restart 1: TERM+start", "neighbour entries", "speaker restarts:"} {
		if strings.Contains(got, s) {
			t.Errorf("merged section still has %q of the replaced scenario:\n%s", s, got)
		}
	}
}

func TestMergeSectionErrors(t *testing.T) {
	good := table(Result{Scenario: "x", Rows: []Row{countRow("x", "m", 0, 0)}})
	for _, c := range []struct{ name, old, table, want string }{
		{"old has no table", "Intro.\n\nMeasured then.\n", good, "old section: no line"},
		{"new has no rule", oldSection, tableHeader + "\n| x | y | z | 0 | 0 | yes |\n", "new table: the line after"},
		{"row without scenario", oldSection, tableHeader + "\n" + tableRule + "\n|  | y | z | 0 | 0 | yes |\n", "names no scenario"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := MergeSection(c.old, c.table); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestRecordScenariosKeepsTheRestOfReliability merges one scenario into a
// copy of docs/reliability.md: every row and notes line of the other
// scenarios, and every other section, stays.
func TestRecordScenariosKeepsTheRestOfReliability(t *testing.T) {
	doc, err := os.ReadFile("../../docs/reliability.md")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "reliability.md")
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	old, ok, err := lab.ReadSection(path, SectionTitle)
	if err != nil || !ok {
		t.Fatalf("read section: %v %v", ok, err)
	}
	pt, err := parseTable(old)
	if err != nil {
		t.Fatal(err)
	}
	titles := map[string]bool{}
	for _, r := range pt.rows {
		titles[rowScenario(r)] = true
	}
	mine := map[string]bool{} // the lines of the replaced scenario
	for _, r := range pt.rows {
		if rowScenario(r) == ScenarioRestarts {
			mine[r] = true
		}
	}
	for _, b := range splitBlocks(pt.post, titles) {
		if b.scenario == ScenarioRestarts {
			for _, l := range strings.Split(b.text, "\n") {
				if l != "" {
					mine[l] = true
				}
			}
		}
	}
	if len(mine) < 3 {
		t.Fatalf("docs/reliability.md has %d lines of %q: not what this test expects", len(mine), ScenarioRestarts)
	}
	res := Result{Scenario: ScenarioRestarts, Form: "1 restart of n2, 2 addresses",
		Rows:  []Row{countRow(ScenarioRestarts, "false claims", 0, 2)},
		Notes: []string{"restart 1: a new note"}}
	stale, err := RecordScenarios(path, Intro, table(res))
	if err != nil {
		t.Fatal(err)
	}
	if stale {
		t.Errorf("docs/reliability.md's chaos section does not start with chaos.Intro")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	var kept int
	for _, l := range strings.Split(string(doc), "\n") {
		if mine[l] {
			if l != ScenarioRestarts+":" && strings.Contains(got, l+"\n") {
				t.Errorf("the replaced scenario's line %q stayed", l)
			}
			continue
		}
		if !strings.Contains(got, l) {
			t.Errorf("line %q of docs/reliability.md is gone", l)
		}
		kept++
	}
	for _, s := range []string{
		"| " + ScenarioRestarts + " | 1 restart of n2, 2 addresses | false claims | 0 of 2 | 0 | yes |",
		"\n" + ScenarioRestarts + ":\n\n- restart 1: a new note\n",
	} {
		if !strings.Contains(got, s) {
			t.Errorf("recorded file lacks %q", s)
		}
	}
	if kept < 100 {
		t.Errorf("only %d lines compared: the doc's section is not what this test expects", kept)
	}
}

// TestReadSectionRoundTrip: ReadSection returns what ReplaceSection wrote,
// before another section and at the end of the file.
func TestReadSectionRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte("# Doc\n\n## A\n\na\n\n## B\n\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"## A", "## B", "## C"} {
		body := "body of " + h + "\n\n| x |\n"
		if err := lab.ReplaceSection(path, h, "# Doc", body); err != nil {
			t.Fatal(err)
		}
		got, ok, err := lab.ReadSection(path, h)
		if err != nil || !ok || got != body {
			t.Errorf("%s: read %q %v %v, wrote %q", h, got, ok, err, body)
		}
	}
	if _, ok, err := lab.ReadSection(path, "## D"); ok || err != nil {
		t.Errorf("missing section: ok %v err %v", ok, err)
	}
}
