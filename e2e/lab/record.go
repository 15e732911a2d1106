package lab

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// ReplaceSection writes body as the section under heading (a whole "## ..."
// line, without its newline) of the Markdown file at path: an existing
// section, from its heading line up to the next "## " heading or the end, is
// replaced in place; a missing one is appended after a blank line; a missing
// or empty file is created with docTitle ("# Performance") first. Every
// other section stays byte for byte. The measurement commands record their
// figures with it (docs/performance.md, docs/reliability.md).
func ReplaceSection(path, heading, docTitle, body string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	section := heading + "\n\n" + body
	text := string(old)
	start := -1
	if strings.HasPrefix(text, heading+"\n") {
		start = 0
	} else if i := strings.Index(text, "\n"+heading+"\n"); i >= 0 {
		start = i + 1
	}
	switch {
	case start >= 0:
		end := len(text)
		if j := strings.Index(text[start+len(heading):], "\n## "); j >= 0 {
			end = start + len(heading) + j + 1
		}
		tail := text[end:]
		if tail != "" {
			section += "\n"
		}
		text = text[:start] + section + tail
	case strings.TrimSpace(text) == "":
		text = docTitle + "\n\n" + section
	default:
		text = strings.TrimRight(text, "\n") + "\n\n" + section
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(text), 0o644)
}
