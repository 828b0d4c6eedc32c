// The platform usage page's charts: allocation and use per GPU model (#model-series) and
// cost per tenant (#cost-data). Loaded with defer, after Chart.js.
document.addEventListener("DOMContentLoaded", function () {
  if (typeof Chart === "undefined") return;
  var el = document.getElementById("model-series");
  if (el) {
    var series = JSON.parse(el.textContent);
    document.querySelectorAll("canvas.model-chart").forEach(function (canvas) {
      var s = series[canvas.dataset.model];
      new Chart(canvas, {type: "line", data: {labels: s.t, datasets: [
        {label: "allocated %", data: s.allocated, borderColor: "#0b5cad", pointRadius: 0},
        {label: "used %", data: s.used, borderColor: "#2f9e44", backgroundColor: "rgba(47,158,68,.15)", fill: true, pointRadius: 0}
      ]}, options: {animation: false, scales: {y: {beginAtZero: true, suggestedMax: 100}}}});
    });
  }
  var c = document.getElementById("cost-data");
  if (c) {
    var rows = JSON.parse(c.textContent);
    new Chart(document.getElementById("cost-chart"), {type: "bar", data: {labels: rows.map(function (r) { return r[0]; }),
      datasets: [{label: "USD", data: rows.map(function (r) { return r[1]; }), backgroundColor: "#0b5cad"}]},
      options: {indexAxis: "y", animation: false}});
  }
});
