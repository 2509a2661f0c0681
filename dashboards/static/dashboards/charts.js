// Render every server-built Plotly figure on the page. Figures arrive as JSON in <script> tags.
(function () {
  document.querySelectorAll("[data-figure]").forEach(function (el) {
    var spec = JSON.parse(document.getElementById(el.dataset.figure).textContent);
    Plotly.newPlot(el, spec.data, spec.layout, {responsive: true, displaylogo: false})
      .then(function () { el.dataset.rendered = "true"; });
  });
})();
