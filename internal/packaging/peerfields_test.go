package packaging

import (
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/herald-lb/herald/api/v1beta2"
)

// peerFieldRow matches a field row of a BGPPeer field table: "| `name` |".
var peerFieldRow = regexp.MustCompile("^\\| `([A-Za-z]+)` \\|(.*)\\|$")

// TestDocsListEveryBGPPeerField: the BGPPeer field tables of docs/bgp.md
// ("BGPPeer fields") and of the migration guide ("BGPPeer fields") each
// have one row per field of v1beta2.BGPPeerSpec, in the type's order, with
// a status, and no row for a field the type lacks (issue #14: "list every
// BGPPeer field with its status").
func TestDocsListEveryBGPPeerField(t *testing.T) {
	var want []string
	st := reflect.TypeOf(v1beta2.BGPPeerSpec{})
	for i := range st.NumField() {
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		want = append(want, name)
	}
	for _, doc := range []struct{ file, heading string }{
		{"bgp.md", "## BGPPeer fields"},
		{"migrating-from-metallb.md", "### BGPPeer fields"},
	} {
		text := string(readFile(t, filepath.Join(repoRoot(t), "docs", doc.file)))
		_, section, ok := strings.Cut(text, "\n"+doc.heading+"\n")
		if !ok {
			t.Errorf("docs/%s has no %q section", doc.file, doc.heading)
			continue
		}
		if i := strings.Index(section, "\n#"); i >= 0 {
			section = section[:i]
		}
		var got []string
		for _, line := range strings.Split(section, "\n") {
			m := peerFieldRow.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			got = append(got, m[1])
			if strings.TrimSpace(m[2]) == "" {
				t.Errorf("docs/%s: the row of %s has no status", doc.file, m[1])
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("docs/%s %q rows:\n got %v\nwant %v (v1beta2.BGPPeerSpec)", doc.file, doc.heading, got, want)
		}
	}
}
