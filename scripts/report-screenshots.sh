#!/usr/bin/env bash
# report-screenshots: render the pages of the simulate report in a real browser
# (headless Chromium, Debian's chromium package) to PNGs, to look at them: the
# report of `make demo` (kvready simulate --compare-naive --report DIR), each page
# at a wide and a narrow window. Then, in the same browser at the same widths, it
# checks what a person looks for (scripts/report-check.js): the plots fit the page
# width, no legend covers data or runs past its image in the browser's own fonts,
# and a legend label (a lease state, a manager) has one colour on every page. It
# fails, naming each problem, otherwise.
#
# `make test` runs it when Chromium is present (.ci/run installs Debian's
# chromium); run by hand without it, this installs it (on Debian as root, with
# apt-get; otherwise it stops at once, naming the command).
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

# The checks: a copy of each page, beside it (its plots load as on the page),
# with every plot's SVG inlined after the page for measuring and the check
# script at the end; the browser runs it and its DOM, dumped, holds the verdict.
work=$(mktemp -d)
trap 'rm -rf "$profile" "$work"; rm -f "$REPORT"/.check-*.html' EXIT
check() { # report-dir page width height json-dir
  local dir=$1 page=$2 width=$3 height=$4 into=$5
  /usr/bin/env python3 - "$dir/$page" "$dir/.check-$page" scripts/report-check.js <<'PY'
import html, re, sys, pathlib
page, copy, script = map(pathlib.Path, sys.argv[1:])
doc = page.read_text()
inlined = []
for src in re.findall(r'<img src="([^"]+\.svg)"', doc):
    svg = (page.parent / html.unescape(src)).read_text()
    svg = re.sub(r'^<\?xml[^>]*\?>', '', svg)
    inlined.append(f'<div class="kvready-check-svg" data-src="{src}" style="position:absolute;left:-100000px;top:0">{svg}</div>')
tail = "".join(inlined) + "<script>" + script.read_text() + "</script>"
copy.write_text(doc.replace("</body>", tail + "</body>"))
PY
  rm -rf "${profile:?}"/*
  mkdir -p "$into"
  timeout "$BOUND" "$browser" --headless --no-sandbox --disable-gpu \
    --disable-background-networking --disable-component-update --disable-sync --no-first-run \
    --user-data-dir="$profile" --hide-scrollbars --virtual-time-budget=3000 \
    --window-size="$width,$height" --dump-dom \
    "file://$(cd "$dir" && pwd)/.check-$page" 2>/dev/null \
    | sed -n 's:.*<pre id="kvready-check">\(.*\)</pre>.*:\1:p' > "$into/${page%.html}-$width.json"
  rm -f "$dir/.check-$page"
  [ -s "$into/${page%.html}-$width.json" ] || { echo "report-screenshots: the check of $dir/$page at $width px gave no verdict" >&2; exit 1; }
}
verdict() { # json-dir: prints every problem; fails if there is one
  /usr/bin/env python3 - "$1" <<'PY'
import html, json, pathlib, sys
results = [json.loads(html.unescape(p.read_text())) for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json"))]
problems, colour = [], {}
for r in results:
    where = f'{r["page"].removeprefix(".check-")} at {r["window"]} px'
    problems += [f"{where}: {p}" for p in r["problems"]]
    if r["plots"] == 0 or r["legends"] == 0:
        problems.append(f"{where}: {r['plots']} plots and {r['legends']} legend entries found; the check no longer sees the report")
    for label, c in r["colours"].items():
        colour.setdefault(label, {}).setdefault(c, []).append(where)
for label, by in sorted(colour.items()):
    if len(by) > 1:
        problems.append(f'"{label}" has {len(by)} colours across the pages: ' + "; ".join(f"{c} on {', '.join(w)}" for c, w in by.items()))
for p in problems:
    print("report-screenshots: " + p)
n = sum(r["legends"] for r in results)
print(f"report-screenshots: checked {len(results)} renderings ({sum(r['plots'] for r in results)} plots, {n} legend entries, {len(colour)} labels): "
      + ("ok" if not problems else f"{len(problems)} problems"))
sys.exit(1 if problems else 0)
PY
}
for page in index.html naive.html; do
  check "$REPORT" "$page" 1280 4200 "$work/report"
  check "$REPORT" "$page" 760 3600 "$work/report"
done
verdict "$work/report" >&2

# The checks catch what they look for: each fault below, put into a copy of
# the report, must fail them with its own message (one window width each).
fault() { # name expected-message python-that-breaks-the-copy-in-argv1
  local name=$1 want=$2 code=$3 copy="$work/fault-$1"
  cp -r "$REPORT" "$copy"
  /usr/bin/env python3 -c "$code" "$copy"
  for page in index.html naive.html; do check "$copy" "$page" 760 3600 "$work/fault-json-$name"; done
  if verdict "$work/fault-json-$name" > "$work/fault-$name.out"; then
    echo "report-screenshots: the checks missed a fault ($name): they passed" >&2; exit 1
  fi
  grep -q -- "$want" "$work/fault-$name.out" || {
    echo "report-screenshots: the checks missed a fault ($name): no \"$want\" in:" >&2; cat "$work/fault-$name.out" >&2; exit 1; }
}
fault legend-over-data "over data reaching" 'import sys,pathlib,re
p=pathlib.Path(sys.argv[1])/"leases-by-state.svg"
p.write_text(re.sub(r"<text x=\"592\.43\"", "<text x=\"300\"", p.read_text(), count=1))'
fault legend-clipped "past its image" 'import sys,pathlib
p=pathlib.Path(sys.argv[1])/"leases-by-state.svg"
p.write_text(p.read_text().replace(">requested</text>", ">requested, with a label far too long for its column</text>", 1))'
fault state-colour "colours across the pages" 'import sys,pathlib,re
p=pathlib.Path(sys.argv[1])/"naive-leases-by-state.svg"
s=p.read_text(); i=s.index(">waiting</text>"); j=s.rindex("stroke:#", 0, i)
p.write_text(s[:j]+"stroke:#123456"+s[j+14:])'
fault too-wide "scrolls sideways" 'import sys,pathlib
for n in ("index.html","naive.html"):
    p=pathlib.Path(sys.argv[1])/n
    p.write_text(p.read_text().replace("img{display:block;width:100%", "img{display:block;width:1500px", 1))'
echo "report-screenshots: each of 4 faults put into a copy of the report failed the checks, as it must" >&2
