package readiness_test

import (
	"io"
	"log/slog"
)

// discard is a logger that writes nothing: the tests read what they check.
var discard = slog.New(slog.NewTextHandler(io.Discard, nil))
