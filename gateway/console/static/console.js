// The console's one script (no build step). Tables and forms work without it; it draws the charts
// (uPlot, vendored) from the data-series attribute of an element, on load and after every htmx swap.
(function () {
  "use strict";

  function drawRequestsChart(root) {
    var holder = root.querySelector ? root.querySelector("#requests-chart") : null;
    if (!holder || typeof uPlot === "undefined") return;
    var data = JSON.parse(holder.getAttribute("data-series") || "[[],[],[]]");
    holder.textContent = "";
    if (!data[0].length) return;
    var width = Math.max(320, Math.min(1200, holder.parentElement.clientWidth || 800));
    new uPlot({
      width: width,
      height: 180,
      series: [
        {},
        { label: "duration (ms)", stroke: "#1f5fbf", scale: "ms" },
        { label: "cost (USD)", stroke: "#9a6700", scale: "usd" }
      ],
      axes: [{}, { scale: "ms", label: "ms" }, { scale: "usd", side: 1, label: "USD", grid: { show: false } }]
    }, data, holder);
  }

  document.addEventListener("DOMContentLoaded", function () { drawRequestsChart(document); });
  document.addEventListener("htmx:afterSwap", function (event) { drawRequestsChart(event.target); });
})();
