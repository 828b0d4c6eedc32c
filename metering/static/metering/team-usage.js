// The team usage page's charts: one line chart per resource class, from the json_script
// #usage-series (held, allocated, used units per hour). Loaded with defer, after Chart.js.
document.addEventListener("DOMContentLoaded", function () {
  var el = document.getElementById("usage-series");
  if (!el || typeof Chart === "undefined") return;
  var series = JSON.parse(el.textContent);
  document.querySelectorAll("canvas.usage-chart").forEach(function (canvas) {
    var s = series[canvas.dataset.slug];
    new Chart(canvas, {
      type: "line",
      data: {
        labels: s.t.map(function (t) { return new Date(t).toLocaleString([], {month: "short", day: "numeric", hour: "2-digit"}); }),
        datasets: [
          {label: "held (quota)", data: s.held, borderColor: "#9aa5b1", stepped: true, pointRadius: 0},
          {label: "allocated", data: s.allocated, borderColor: "#0b5cad", pointRadius: 0},
          {label: "used", data: s.used, borderColor: "#2f9e44", backgroundColor: "rgba(47,158,68,.15)", fill: true, pointRadius: 0}
        ]
      },
      options: {animation: false, interaction: {mode: "index", intersect: false}, scales: {y: {beginAtZero: true, title: {display: true, text: "units"}}}}
    });
  });
});
