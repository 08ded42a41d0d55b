package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinksResolve: every relative link in README.md, CHANGELOG.md and
// docs/*.md names a file or directory of the repository and, when it has
// an anchor into a Markdown page, a heading of that page.
func TestDocLinksResolve(t *testing.T) {
	root := repoRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"), filepath.Join(root, "CHANGELOG.md"))
	for _, p := range brokenLinks(t, root, pages) {
		t.Error(p)
	}
}

// The check finds a missing file, a missing anchor in another page and in
// the same page, and ignores external links and links in code.
func TestBrokenLinksAreFound(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("other.md", "# Other page\n\n## The Failed → Deferred → Completed lifecycle\n\n## 8. The `Resolver` app\n")
	page := write("page.md", strings.Join([]string{
		"# Page",
		"[fine](other.md) [fine](other.md#the-failed--deferred--completed-lifecycle) [fine](other.md#8-the-resolver-app)",
		"[fine](#page) [external](https://example.com/x.md) `[in code](missing.md)`",
		"```",
		"[in a block](missing.md)",
		"```",
		"[no file](missing.md) [no anchor](other.md#nowhere) [no local anchor](#nowhere)",
	}, "\n"))
	got := brokenLinks(t, dir, []string{page})
	want := []string{"page.md: missing.md", "page.md: other.md#nowhere", "page.md: #nowhere"}
	if len(got) != len(want) {
		t.Fatalf("broken links = %q, want %d: %q", got, len(want), want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("broken link %d = %q, want %q…", i, got[i], want[i])
		}
	}
}

func TestHeadingAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Store failures: the re-send budget":      "store-failures-the-re-send-budget",
		"8. The NimBus Resolver app":              "8-the-nimbus-resolver-app",
		"The Failed → Deferred → Completed cycle": "the-failed--deferred--completed-cycle",
		"Run locally with `func start`":           "run-locally-with-func-start",
		"Exactly-once effects with Cosmos DB":     "exactly-once-effects-with-cosmos-db",
		"Setting_names (v0.x)":                    "setting_names-v0x",
	} {
		if got := headingAnchor(heading); got != want {
			t.Errorf("headingAnchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

var (
	mdLink      = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	inlineCode  = regexp.MustCompile("`[^`]*`")
	headingLine = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// brokenLinks returns "page: target (why)" for each relative link of pages
// that does not resolve, in page and link order.
func brokenLinks(t *testing.T, root string, pages []string) []string {
	t.Helper()
	anchors := map[string]map[string]bool{} // by absolute page path
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := map[string]bool{}
		for _, line := range proseLines(string(readFile(t, path))) {
			if m := headingLine.FindStringSubmatch(line); m != nil {
				a[headingAnchor(m[1])] = true
			}
		}
		anchors[path] = a
		return a
	}
	var broken []string
	for _, page := range pages {
		rel, _ := filepath.Rel(root, page)
		for _, line := range proseLines(string(readFile(t, page))) {
			for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
				}
				if _, err := os.Stat(path); err != nil {
					broken = append(broken, rel+": "+target+" (no such file)")
					continue
				}
				if anchor != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[anchor] {
					broken = append(broken, rel+": "+target+" (no such heading)")
				}
			}
		}
	}
	return broken
}

// proseLines returns the lines of a Markdown text outside fenced code
// blocks.
func proseLines(text string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// headingAnchor is the anchor GitHub gives a heading: lower case, spaces
// to hyphens, punctuation other than hyphens and underscores dropped.
func headingAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
