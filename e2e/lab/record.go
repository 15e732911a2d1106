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
	start, end := findSection(text, heading)
	switch {
	case start >= 0:
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

// ReadSection returns the body of the section under heading of the
// Markdown file at path, as ReplaceSection delimits it (without the heading
// line and the blank line after it, nor the newline before the next
// heading); ok is false when the file or the section is missing.
func ReadSection(path, heading string) (body string, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	text := string(b)
	start, end := findSection(text, heading)
	if start < 0 {
		return "", false, nil
	}
	body = strings.TrimPrefix(text[start+len(heading):end], "\n")
	body = strings.TrimPrefix(body, "\n")
	if end < len(text) {
		// ReplaceSection adds one newline before the next heading.
		body = strings.TrimSuffix(body, "\n")
	}
	return body, true, nil
}

// findSection returns the byte range of the section under heading in text,
// from its heading line up to the next "## " heading or the end; start is
// -1 when there is none.
func findSection(text, heading string) (start, end int) {
	start = -1
	if strings.HasPrefix(text, heading+"\n") {
		start = 0
	} else if i := strings.Index(text, "\n"+heading+"\n"); i >= 0 {
		start = i + 1
	}
	if start < 0 {
		return -1, -1
	}
	end = len(text)
	if j := strings.Index(text[start+len(heading):], "\n## "); j >= 0 {
		end = start + len(heading) + j + 1
	}
	return start, end
}
