package readme

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	delimiterRow = regexp.MustCompile(`^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$`)
	codeSpan     = regexp.MustCompile("`[^`]*`")
	// metricCell is a first cell naming one metric family: a table lists each once.
	metricCell = regexp.MustCompile("^`kvready_[a-z_]+`$")
)

// columns counts a table row's cells: a pipe inside a code span or escaped
// (\|) separates nothing.
func columns(row string) int {
	row = codeSpan.ReplaceAllStringFunc(row, func(s string) string { return strings.ReplaceAll(s, "|", "x") })
	row = strings.ReplaceAll(row, `\|`, "x")
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(row, "|")
	row = strings.TrimSuffix(row, "|")
	return strings.Count(row, "|") + 1
}

// tableProblems returns, for one markdown document, every table row whose
// cell count is not its header's, and every row that belongs to no table (a
// row with no header and delimiter above it: a table broken by a blank line
// or a paragraph, which renders as text with pipes in it).
func tableProblems(name, text string) []string {
	var problems []string
	lines := strings.Split(text, "\n")
	fenced := false
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(strings.TrimSpace(line), "|") {
			continue
		}
		if i+1 >= len(lines) || !delimiterRow.MatchString(lines[i+1]) {
			problems = append(problems, name+":"+strconv.Itoa(i+1)+": a table row under no header: "+short(line))
			continue
		}
		want := columns(line)
		if got := columns(lines[i+1]); got != want {
			problems = append(problems, name+":"+strconv.Itoa(i+2)+": the delimiter row has "+strconv.Itoa(got)+" cells; the header has "+strconv.Itoa(want))
		}
		j := i + 2
		seen := map[string]int{}
		for ; j < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[j]), "|"); j++ {
			if got := columns(lines[j]); got != want {
				problems = append(problems, name+":"+strconv.Itoa(j+1)+": "+strconv.Itoa(got)+" cells, want the header's "+strconv.Itoa(want)+": "+short(lines[j]))
			}
			key := firstCell(lines[j])
			if first, ok := seen[key]; ok && metricCell.MatchString(key) {
				problems = append(problems, name+":"+strconv.Itoa(j+1)+": the row of "+key+" again (first on line "+strconv.Itoa(first)+")")
			}
			seen[key] = j + 1
		}
		i = j - 1
	}
	return problems
}

// firstCell is a row's first cell, trimmed: what the row is about.
func firstCell(row string) string {
	row = codeSpan.ReplaceAllStringFunc(row, func(s string) string { return strings.ReplaceAll(s, "|", "\x00") })
	cell, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(row), "|"), "|")
	return strings.TrimSpace(cell)
}

func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// Every markdown table in README.md and docs/ renders as a table: each row
// has its header's cell count, no row is left outside a table (what a merge
// or a blank line in the middle of a table leaves behind), and no metric has
// two rows in one table (one contradicting the other).
func TestMarkdownTablesAreWhole(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs)
	var problems []string
	for _, path := range append([]string{filepath.Join(root, "README.md")}, docs...) {
		text, err := os.ReadFile(path)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, path)
		problems = append(problems, tableProblems(rel, string(text))...)
	}
	require.Empty(t, problems, "broken markdown tables")
}

// The check itself finds the faults it exists for.
func TestTableProblemsFindsBrokenTables(t *testing.T) {
	for _, tc := range []struct{ name, doc string }{
		{"a short row", "| a | b |\n| --- | --- |\n| 1 |\n"},
		{"a long row", "| a | b |\n| --- | --- |\n| 1 | 2 | 3 |\n"},
		{"a row cut off by a blank line", "| a | b |\n| --- | --- |\n| 1 | 2 |\n\n| 3 | 4 |\n"},
		{"a row after a paragraph", "| a | b |\n| --- | --- |\n| 1 | 2 |\nsome text\n| 3 | 4 |\n"},
		{"a delimiter of another width", "| a | b |\n| --- |\n"},
		{"a metric twice", "| a | b |\n| --- | --- |\n| `kvready_m` | 1 |\n| `kvready_n` | 2 |\n| `kvready_m` | 3 |\n"},
	} {
		require.NotEmpty(t, tableProblems("doc.md", tc.doc), tc.name)
	}
	require.Empty(t, tableProblems("doc.md", "| a | b |\n| --- | --- |\n| `x|y` | a \\| b |\n\n```\n| not | a table\n```\n"))
}
