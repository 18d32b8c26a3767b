package main

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// link is one link destination found in a Markdown file.
type link struct {
	line int
	dest string
}

// doc is what the check needs of one Markdown file: the anchors it defines
// and the links it holds, both outside code.
type doc struct {
	anchors map[string]bool
	links   []link
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$`)
	fenceOpen  = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	// An explicit anchor: <a name="x">, <a id="x">, or id="x" on any tag.
	htmlAnchor = regexp.MustCompile(`<[a-zA-Z][^>]*\s(?:name|id)\s*=\s*["']([^"']+)["']`)
	// A reference definition: [label]: destination
	refDef = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	// Inline markup dropped from heading text before it becomes an anchor.
	mdLinkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
	closingAtx = regexp.MustCompile(`[ \t]+#+$`)
)

// parse reads a Markdown file the way GitHub renders it, as far as links
// and anchors go: fenced code blocks and inline code spans hold no links,
// ATX headings (# ...) and explicit HTML ids define anchors. Setext
// headings (text underlined with === or ---) are not read: a link to one
// is reported, which fails loudly rather than passing wrongly.
func parse(text string) doc {
	d := doc{anchors: map[string]bool{}}
	seen := map[string]int{}
	var fence string
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		if fence != "" {
			if closesFence(line, fence) {
				fence = ""
			}
			continue
		}
		if m := fenceOpen.FindStringSubmatch(line); m != nil {
			fence = m[1]
			continue
		}
		if strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t") {
			// An indented code block, or a continuation line of a list
			// item: read it for links all the same (a list's nested lines
			// are usually indented prose), but never as a heading.
			d.links = append(d.links, inlineLinks(line, n)...)
			continue
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			title := closingAtx.ReplaceAllString(m[2], "")
			d.anchors[uniqueSlug(slug(title), seen)] = true
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(stripCode(line), -1) {
			d.anchors[m[1]] = true
		}
		if m := refDef.FindStringSubmatch(line); m != nil {
			d.links = append(d.links, link{line: n, dest: m[1]})
			continue
		}
		d.links = append(d.links, inlineLinks(line, n)...)
	}
	return d
}

// closesFence reports whether line closes a fence opened by open: the same
// character, at least as many, nothing else but spaces.
func closesFence(line, open string) bool {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 {
		return false
	}
	t = strings.TrimRight(t, " \t")
	if len(t) < len(open) {
		return false
	}
	for _, r := range t {
		if r != rune(open[0]) {
			return false
		}
	}
	return true
}

// stripCode blanks out inline code spans (`...`, “...“), which hold no
// links.
func stripCode(line string) string {
	var b strings.Builder
	for i := 0; i < len(line); {
		if line[i] != '`' {
			b.WriteByte(line[i])
			i++
			continue
		}
		j := i
		for j < len(line) && line[j] == '`' {
			j++
		}
		ticks := line[i:j]
		end := strings.Index(line[j:], ticks)
		if end < 0 {
			// An unmatched run of backticks is literal text.
			b.WriteString(ticks)
			i = j
			continue
		}
		b.WriteString(strings.Repeat(" ", j-i+end+len(ticks)))
		i = j + end + len(ticks)
	}
	return b.String()
}

// inlineLinks finds the destinations of [text](dest) and ![alt](dest) on
// one line, outside code spans. A destination may be in <...> and may be
// followed by a title; parentheses inside it must balance.
func inlineLinks(line string, n int) []link {
	s := stripCode(line)
	var out []link
	for i := 0; ; {
		k := strings.Index(s[i:], "](")
		if k < 0 {
			return out
		}
		start := i + k + 2
		dest, end := destination(s[start:])
		if dest != "" {
			out = append(out, link{line: n, dest: dest})
		}
		i = start + end
	}
}

// destination reads a link destination at the start of s and returns it
// and how many bytes it took.
func destination(s string) (string, int) {
	t := strings.TrimLeft(s, " ")
	skip := len(s) - len(t)
	if strings.HasPrefix(t, "<") {
		if e := strings.IndexByte(t, '>'); e > 0 {
			return t[1:e], skip + e + 1
		}
		return "", skip
	}
	depth := 0
	for i, r := range t {
		switch {
		case r == '(':
			depth++
		case r == ')' && depth == 0:
			return t[:i], skip + i
		case r == ')':
			depth--
		case unicode.IsSpace(r):
			return t[:i], skip + i
		}
	}
	return "", skip + len(t)
}

// slug is GitHub's anchor for a heading: the rendered text, lower-cased,
// with everything but letters, digits, spaces, '-' and '_' dropped and each
// space turned into '-'.
func slug(title string) string {
	t := mdLinkText.ReplaceAllString(title, "$1")
	t = htmlTag.ReplaceAllString(t, "")
	t = strings.NewReplacer("`", "", "*", "").Replace(t)
	var b strings.Builder
	for _, r := range strings.ToLower(t) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// uniqueSlug numbers repeated anchors as GitHub does: x, x-1, x-2, ...
func uniqueSlug(s string, seen map[string]int) string {
	n, dup := seen[s]
	seen[s] = n + 1
	if !dup {
		return s
	}
	return s + "-" + strconv.Itoa(n)
}
