package chaos

import (
	"fmt"
	"strings"

	"github.com/herald-lb/herald/e2e/lab"
)

// tableHeader and tableRule open the chaos table (see Table).
const (
	tableHeader = "| scenario | run | measure | value | target | met |"
	tableRule   = "|---|---|---|---|---|---|"
)

// RecordScenarios records table (from Table) as a run of some scenarios
// only: in the "## Chaos results" section of the Markdown file at path the
// rows and notes of every scenario with rows in table are replaced by the
// new ones, and the rows and notes of every other scenario stay as they are
// (see MergeSection). A file without the section, or a section without a
// chaos table, gets the whole section with intro, as RecordSection writes
// it. The old text above the table stays: staleIntro reports that it does
// not start with intro (a full run, with RecordSection, rewrites it).
func RecordScenarios(path, intro, table string) (staleIntro bool, err error) {
	old, ok, err := lab.ReadSection(path, SectionTitle)
	if err != nil {
		return false, err
	}
	if !ok || !strings.Contains(old, "\n"+tableHeader+"\n") {
		return false, RecordSection(path, intro, table)
	}
	merged, err := MergeSection(old, table)
	if err != nil {
		return false, fmt.Errorf("record %s in %s: %w", SectionTitle, path, err)
	}
	staleIntro = !strings.HasPrefix(old, strings.TrimRight(intro, "\n")+"\n")
	return staleIntro, lab.ReplaceSection(path, SectionTitle, "# Reliability", merged)
}

// MergeSection merges table, the output of Table for a run of some
// scenarios, into old, the body of a "## Chaos results" section (intro,
// paragraphs saying when the rows were measured, the table, then one notes
// block per scenario: a line "<scenario>:" and what follows up to the next
// such line). A scenario is named by the first cell of its rows
// (Result.Scenario).
//
// For each scenario with rows in table, its old rows are replaced by the
// new ones at the place of its first old row (at the end of the table when
// it had none), and its old notes block by the new one (removed when the
// new run has none). A scenario with notes but no rows in table (it did not
// complete) keeps its old rows, and the new notes are added at the end of
// its old block. Every other row and notes block stays byte for byte, and
// so does the text above the table (the intro and the paragraphs saying
// which run measured what), followed by a new paragraph naming the re-run
// scenarios with table's own "Measured ..." line.
//
// The error names the part of old or table that is not a chaos table.
func MergeSection(old, table string) (string, error) {
	o, err := parseTable(old)
	if err != nil {
		return "", fmt.Errorf("old section: %w", err)
	}
	n, err := parseTable(table)
	if err != nil {
		return "", fmt.Errorf("new table: %w", err)
	}
	// The notes blocks are cut at lines naming a scenario of either table.
	titles := map[string]bool{}
	for _, r := range append(append([]string{}, o.rows...), n.rows...) {
		titles[rowScenario(r)] = true
	}
	// Table writes a block for every result with notes, also one without
	// rows: its line ends with ':' and follows the rows.
	for _, b := range splitBlocks(n.post, nil) {
		titles[b.scenario] = true
	}
	oBlocks := splitBlocks(o.post, titles)
	var oLead *notesBlock // hand-written text between the rows and the first block
	if len(oBlocks) > 0 && oBlocks[0].scenario == "" {
		oLead = &oBlocks[0]
		oBlocks = oBlocks[1:]
	}
	nBlocks := splitBlocks(n.post, titles)

	replaced := map[string]bool{}
	newRows := map[string][]string{}
	var order []string // scenarios with new rows, in the new table's order
	for _, r := range n.rows {
		s := rowScenario(r)
		if !replaced[s] {
			order = append(order, s)
		}
		replaced[s] = true
		newRows[s] = append(newRows[s], r)
	}
	var rows []string
	placed := map[string]bool{}
	for _, r := range o.rows {
		s := rowScenario(r)
		if !replaced[s] {
			rows = append(rows, r)
			continue
		}
		if !placed[s] {
			rows = append(rows, newRows[s]...)
			placed[s] = true
		}
	}
	for _, s := range order {
		if !placed[s] {
			rows = append(rows, newRows[s]...)
		}
	}

	newBlock := map[string]notesBlock{}
	for _, b := range nBlocks {
		if b.scenario != "" {
			newBlock[b.scenario] = b
		}
	}
	var blocks []string
	used := map[string]bool{}
	for _, b := range oBlocks {
		nb, ok := newBlock[b.scenario]
		switch {
		case replaced[b.scenario]:
			if ok && !used[b.scenario] {
				blocks = append(blocks, nb.text)
			}
		case ok && !used[b.scenario]:
			blocks = append(blocks, b.text+"\n"+nb.bullets())
		default:
			blocks = append(blocks, b.text)
			continue
		}
		used[b.scenario] = true
	}
	for _, b := range nBlocks {
		if b.scenario != "" && !used[b.scenario] {
			blocks = append(blocks, b.text)
			used[b.scenario] = true
		}
	}

	var ran []string
	for _, b := range nBlocks {
		if b.scenario != "" && !replaced[b.scenario] {
			ran = append(ran, fmt.Sprintf("%q (did not complete, rows kept)", b.scenario))
		}
	}
	for _, s := range order {
		ran = append(ran, fmt.Sprintf("%q", s))
	}
	var pre strings.Builder
	pre.WriteString(strings.TrimRight(o.pre, "\n"))
	fmt.Fprintf(&pre, "\n\nRe-run of %s alone (bench-chaos --scenarios; the rows and notes of the others are kept): %s",
		strings.Join(ran, ", "), strings.TrimSpace(n.pre))

	var b strings.Builder
	b.WriteString(pre.String() + "\n\n" + tableHeader + "\n" + tableRule + "\n")
	for _, r := range rows {
		b.WriteString(r + "\n")
	}
	if oLead != nil && strings.TrimSpace(oLead.text) != "" {
		b.WriteString("\n" + oLead.text + "\n")
	}
	for _, t := range blocks {
		b.WriteString("\n" + t + "\n")
	}
	return b.String(), nil
}

// parsedTable is a chaos section body or Table output cut at its table.
type parsedTable struct {
	pre  string   // everything before the header line
	rows []string // the rows after the rule, whole lines without "\n"
	post []string // the lines after the rows
}

func parseTable(text string) (parsedTable, error) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	h := -1
	for i, l := range lines {
		if l == tableHeader {
			h = i
			break
		}
	}
	if h < 0 {
		return parsedTable{}, fmt.Errorf("no line %q", tableHeader)
	}
	if h+1 >= len(lines) || lines[h+1] != tableRule {
		return parsedTable{}, fmt.Errorf("the line after %q is not %q", tableHeader, tableRule)
	}
	p := parsedTable{pre: strings.Join(lines[:h], "\n")}
	i := h + 2
	for ; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
		if rowScenario(lines[i]) == "" {
			return parsedTable{}, fmt.Errorf("row %q names no scenario", lines[i])
		}
		p.rows = append(p.rows, lines[i])
	}
	p.post = lines[i:]
	return p, nil
}

// rowScenario is the first cell of a table row.
func rowScenario(row string) string {
	cells := strings.Split(row, "|")
	if len(cells) < 3 {
		return ""
	}
	return strings.TrimSpace(cells[1])
}

// notesBlock is the notes of one scenario: its "<scenario>:" line and the
// lines up to the next block, trailing blank lines left out. scenario ""
// is the text before the first block.
type notesBlock struct {
	scenario, text string
}

// bullets is the block without its title line and the blank lines after it.
func (b notesBlock) bullets() string {
	_, rest, _ := strings.Cut(b.text, "\n")
	return strings.TrimLeft(rest, "\n")
}

// splitBlocks cuts lines at every line "<title>:" whose title is in titles
// (nil: any line ending with ':' that follows a blank line or starts the
// text and is not a bullet). The first block has scenario "" when text
// precedes the first title.
func splitBlocks(lines []string, titles map[string]bool) []notesBlock {
	var out []notesBlock
	cur := notesBlock{}
	var buf []string
	flush := func() {
		text := strings.TrimRight(strings.Join(buf, "\n"), "\n ")
		if cur.scenario != "" || strings.TrimSpace(text) != "" {
			cur.text = text
			out = append(out, cur)
		}
	}
	for i, l := range lines {
		t, isTitle := strings.CutSuffix(l, ":")
		if isTitle {
			if titles != nil {
				isTitle = titles[t]
			} else {
				isTitle = t != "" && !strings.HasPrefix(t, "-") && !strings.HasPrefix(t, " ") && (i == 0 || strings.TrimSpace(lines[i-1]) == "")
			}
		}
		if isTitle {
			flush()
			cur, buf = notesBlock{scenario: t}, nil
		}
		buf = append(buf, l)
	}
	flush()
	return out
}
