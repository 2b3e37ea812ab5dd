// The aggregate pages' charts (Tiers, Keys): uPlot (vendored) drawn from each element's data-chart
// JSON (gateway/console/aggregates/charts.py), on load and after every htmx swap.
(function () {
  "use strict";

  var COLOURS = ["#1f5fbf", "#9a6700", "#1b7a3a", "#b3261e", "#6f42c1", "#0b7285", "#d9480f", "#5b6474"];

  function width(holder) {
    return Math.max(320, Math.min(1000, (holder.parentElement && holder.parentElement.clientWidth) || 800));
  }

  function usd(value) {
    if (value === null || value === undefined) return "";
    var text = Number(value).toPrecision(2);
    if (text.indexOf(".") >= 0 && text.indexOf("e") < 0) text = text.replace(/0+$/, "").replace(/\.$/, "");
    return "$" + text;
  }

  function envelope(doc) {
    var series = [{ label: "cost (USD)" }];
    doc.series.forEach(function (label, i) {
      var line = label === "envelope";
      series.push({
        label: label,
        stroke: COLOURS[i % COLOURS.length],
        width: line ? 2 : 0,
        spanGaps: line,
        points: { show: true, size: line ? 5 : 11, fill: COLOURS[i % COLOURS.length] }
      });
    });
    return {
      opts: {
        height: 260,
        scales: { x: { time: false, distr: 3 }, y: { auto: true } },
        axes: [
          { label: "cost per request (USD)", values: function (u, splits) { return splits.map(usd); } },
          { label: "quality", size: 60 }
        ],
        series: series
      },
      data: [doc.x].concat(doc.columns)
    };
  }

  function histogram(doc) {
    var threshold = doc.threshold;
    var bars = uPlot.paths && uPlot.paths.bars ? uPlot.paths.bars({ size: [0.8, 40] }) : null;
    return {
      opts: {
        height: 180,
        scales: { x: { time: false } },
        legend: { show: false },
        axes: [{ label: "score (bucket upper bound)" }, { label: "answers" }],
        series: [{ label: "score" }, { label: doc.series[0], stroke: COLOURS[0], fill: "rgba(31,95,191,0.35)", paths: bars, points: { show: false } }],
        hooks: {
          draw: [function (u) {
            if (threshold === null || threshold === undefined) return;
            var x = u.valToPos(threshold, "x", true);
            var ctx = u.ctx;
            ctx.save();
            ctx.strokeStyle = "#b3261e";
            ctx.lineWidth = 2;
            ctx.setLineDash([6, 4]);
            ctx.beginPath();
            ctx.moveTo(x, u.bbox.top);
            ctx.lineTo(x, u.bbox.top + u.bbox.height);
            ctx.stroke();
            ctx.restore();
          }]
        }
      },
      data: [doc.x].concat(doc.columns)
    };
  }

  function lines(doc) {
    var last = doc.x[doc.x.length - 1];
    var series = [{ label: "minute" }];
    doc.series.forEach(function (label, i) {
      series.push({ label: label, stroke: COLOURS[i % COLOURS.length], width: 2, spanGaps: true });
    });
    return {
      opts: {
        height: 240,
        // At least the last half hour on x: one minute's sample alone is a point, not a year.
        scales: { x: { time: true, auto: false, range: [Math.min(doc.x[0], last - 1800), last + 60] } },
        axes: [{}, { label: "spent (USD)", size: 80, values: function (u, splits) { return splits.map(usd); } }],
        series: series
      },
      data: [doc.x].concat(doc.columns)
    };
  }

  var KINDS = { envelope: envelope, histogram: histogram, lines: lines };

  function draw(root) {
    if (typeof uPlot === "undefined" || !root.querySelectorAll) return;
    root.querySelectorAll("[data-chart]").forEach(function (holder) {
      var doc = JSON.parse(holder.getAttribute("data-chart"));
      holder.textContent = "";
      if (!doc.x.length || !KINDS[doc.kind]) return;
      var chart = KINDS[doc.kind](doc);
      chart.opts.width = width(holder);
      new uPlot(chart.opts, chart.data, holder);
    });
  }

  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  document.addEventListener("htmx:afterSwap", function (event) { draw(event.target); });
})();
