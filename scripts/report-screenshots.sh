#!/usr/bin/env bash
# report-screenshots: render the pages of the simulate report in a real browser
# (headless Chromium, Debian's chromium package) to PNGs, to look at them: the
# report of `make demo` (kvready simulate --compare-naive --report DIR), each page
# at a wide and a narrow window. Chromium is installed here only (on Debian as
# root, with apt-get; otherwise this stops at once, naming the command), never by
# `make test`, whose report checks read the HTML and SVG without a browser.
#
#   REPORT=bin/report  OUT=bin/report-screenshots  GO=go  ./scripts/report-screenshots.sh
set -euo pipefail
GO=${GO:-go}
REPORT=${REPORT:-bin/report}
OUT=${OUT:-bin/report-screenshots}
# Every browser run is bounded: a page of this report renders in well under a second.
BOUND=${BOUND:-120}

browser=""
for b in chromium chromium-browser; do
  if command -v "$b" >/dev/null 2>&1; then browser=$b; break; fi
done
if [ -z "$browser" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "report-screenshots: installing chromium (headless, for the screenshots only)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends chromium
    browser=chromium
  else
    echo "report-screenshots: needs Chromium. Install it with:" >&2
    echo "    sudo apt-get install -y chromium" >&2
    exit 1
  fi
fi

echo "report-screenshots: the report of make demo into $REPORT" >&2
"$GO" run ./cmd/kvready simulate --compare-naive --report "$REPORT" >/dev/null

mkdir -p "$OUT"
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
shot() { # page width height
  local page=$1 width=$2 height=$3
  local png="$OUT/${page%.html}-${width}.png"
  rm -rf "${profile:?}"/*
  timeout "$BOUND" "$browser" --headless --no-sandbox --disable-gpu \
    --disable-background-networking --disable-component-update --disable-sync --no-first-run \
    --user-data-dir="$profile" --hide-scrollbars --virtual-time-budget=3000 \
    --window-size="$width,$height" --screenshot="$png" \
    "file://$(cd "$REPORT" && pwd)/$page" >/dev/null 2>&1
  [ -s "$png" ] || { echo "report-screenshots: no screenshot of $page at $width px" >&2; exit 1; }
  echo "$png"
}
for page in index.html naive.html; do
  [ -f "$REPORT/$page" ] || { echo "report-screenshots: $REPORT/$page is missing" >&2; exit 1; }
  shot "$page" 1280 4200
  shot "$page" 760 3600
done
