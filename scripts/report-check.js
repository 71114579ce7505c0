// report-check.js: what a person checks on a page of the simulate report,
// measured by the browser that renders it (scripts/report-screenshots.sh adds
// it to a copy of each page, with each plot's SVG inlined after the page, and
// reads back the JSON it writes into <pre id="kvready-check">):
//   - the plots fit the page width: nothing scrolls sideways, and every plot
//     lies within the window;
//   - legends do not cover data: every legend entry (a text right of a short
//     two-point swatch) starts right of every data line and of the plot area,
//     and ends inside its image, measured in this browser's own fonts (the
//     plots were laid out with Liberation Sans's metrics; a fallback font may
//     run wider);
//   - the colour of each legend label, for the caller to compare across pages.
(function () {
  function points(d) {
    return (d.match(/-?[0-9.]+,-?[0-9.]+/g) || []).length;
  }
  function stroke(el) {
    var m = /stroke:(#[0-9A-Fa-f]{6})/.exec(el.getAttribute("style") || "");
    return m ? m[1].toUpperCase() : "";
  }
  function check() {
    var out = { page: location.pathname.replace(/.*\//, ""), window: document.documentElement.clientWidth, plots: 0, legends: 0, colours: {}, problems: [] };
    var vw = document.documentElement.clientWidth;
    if (document.documentElement.scrollWidth > vw + 1) {
      out.problems.push("the page scrolls sideways: " + document.documentElement.scrollWidth + " px wide in a " + vw + " px window");
    }
    var imgs = document.querySelectorAll("img");
    for (var i = 0; i < imgs.length; i++) {
      var img = imgs[i], name = img.getAttribute("src"), r = img.getBoundingClientRect();
      out.plots++;
      if (!img.complete || img.naturalWidth === 0) out.problems.push(name + " did not load");
      if (r.left < -0.5 || r.right > vw + 0.5) {
        out.problems.push(name + " is drawn from x=" + r.left.toFixed(1) + " to x=" + r.right.toFixed(1) + " in a " + vw + " px window");
      }
    }
    var svgs = document.querySelectorAll("div.kvready-check-svg");
    for (var s = 0; s < svgs.length; s++) {
      var holder = svgs[s], file = holder.getAttribute("data-src"), svg = holder.querySelector("svg");
      if (!svg) { out.problems.push(file + ": no SVG"); continue; }
      var box = svg.getBoundingClientRect();
      var dataRight = -Infinity, paths = svg.querySelectorAll("path");
      for (var p = 0; p < paths.length; p++) {
        if (points(paths[p].getAttribute("d") || "") > 2) { // a data line, or the plot area
          dataRight = Math.max(dataRight, paths[p].getBoundingClientRect().right);
        }
      }
      var texts = svg.querySelectorAll("text");
      for (var t = 0; t < texts.length; t++) {
        var text = texts[t], prev = text.previousElementSibling;
        if (!prev || prev.tagName.toLowerCase() !== "path" || points(prev.getAttribute("d") || "") !== 2 || !stroke(prev)) continue;
        var sw = prev.getBoundingClientRect(), tr = text.getBoundingClientRect();
        if (Math.abs((sw.top + sw.bottom) / 2 - (tr.top + tr.bottom) / 2) > tr.height) continue; // not beside it: an axis tick
        var label = text.textContent;
        out.legends++;
        if (sw.left <= dataRight || tr.left <= dataRight) {
          out.problems.push(file + ": legend entry \"" + label + "\" starts at x=" + Math.min(sw.left, tr.left).toFixed(1) + ", over data reaching x=" + dataRight.toFixed(1));
        }
        if (tr.right > box.right + 0.5) {
          out.problems.push(file + ": legend entry \"" + label + "\" ends at x=" + tr.right.toFixed(1) + ", past its image's edge at x=" + box.right.toFixed(1) + " (clipped)");
        }
        var key = label.replace(/: [0-9]+$/, ""); // "kvready manager: 3" -> "kvready manager"
        var c = stroke(prev);
        if (out.colours[key] && out.colours[key] !== c) {
          out.problems.push(file + ": \"" + key + "\" is drawn in " + c + " here and " + out.colours[key] + " elsewhere on the page");
        }
        out.colours[key] = c;
      }
    }
    var pre = document.createElement("pre");
    pre.id = "kvready-check";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  }
  if (document.readyState === "complete") check();
  else window.addEventListener("load", check);
})();
