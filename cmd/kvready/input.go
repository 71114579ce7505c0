package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/kvready/kvready/staging"
)

// oneJSONObject reports whether data is exactly one JSON object (white space
// around it aside). Anything else — text or binary bytes that are not JSON,
// a truncated object, data after it, an array, a string — is input that
// cannot be read as the document a command wants (exitUsage); an object
// with wrong or missing fields is read and refused (exitFail).
func oneJSONObject(data []byte) bool {
	trimmed := bytes.TrimSpace(data)
	return len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed)
}

// layoutStatus is the exit status of a layout that ParseLayout refused:
// exitUsage when data is not one JSON object at all, exitFail when it is
// one and is not a valid layout.
func layoutStatus(data []byte, err error) int {
	if errors.Is(err, staging.ErrNotJSON) || !oneJSONObject(data) {
		return exitUsage
	}
	return exitFail
}

// layoutRefused reports a layout ParseLayout refused, in the same words and
// with the same status in every command that reads one.
func (e *env) layoutRefused(path string, data []byte, err error) int {
	status := layoutStatus(data, err)
	if status == exitUsage {
		// Said once: the parser's own message may say it already.
		want := "; want one JSON object"
		if strings.Contains(err.Error(), "want one JSON object") {
			want = ""
		}
		e.errorf("%s: not a layout description: %v%s", path, err, want)
	} else {
		e.errorf("%s: invalid layout: %v", path, err)
	}
	return status
}
