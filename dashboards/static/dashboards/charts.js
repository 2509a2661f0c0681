// Render every server-built Plotly figure on the page. Figures arrive as JSON in <script> tags.
(function () {
  // On a phone a long title would run past the chart: break it onto two lines at a space
  // near the middle, and use a smaller font, instead of cutting it off.
  function fitTitle(layout, width) {
    var title = layout.title;
    if (!title || !title.text || width >= 600 || title.text.indexOf("<br>") >= 0) return;
    title.font = Object.assign({}, title.font, {size: 13});
    if (title.text.length * 7 < width - 20) return;
    var mid = Math.floor(title.text.length / 2);
    var cut = title.text.lastIndexOf(" ", mid);
    if (cut <= 0) cut = title.text.indexOf(" ", mid);
    if (cut > 0) title.text = title.text.slice(0, cut) + "<br>" + title.text.slice(cut + 1);
    layout.margin = Object.assign({}, layout.margin, {t: 55});
  }
  // On a phone, slanted date ticks grow down into the legend below them: fewer, level ticks.
  function fitAxis(layout, width) {
    if (width >= 600 || !layout.xaxis || layout.xaxis.type !== "date") return;
    layout.xaxis = Object.assign({nticks: 3, tickangle: 0}, layout.xaxis);
  }
  // The toolbar (modebar) shows only while the pointer is over a chart, so it never sits on
  // a chart's title; a figure's own spec.config may say otherwise.
  var CONFIG = {responsive: true, displaylogo: false, displayModeBar: "hover"};
  document.querySelectorAll("[data-figure]").forEach(function (el) {
    var spec = JSON.parse(document.getElementById(el.dataset.figure).textContent);
    fitTitle(spec.layout, el.clientWidth);
    fitAxis(spec.layout, el.clientWidth);
    Plotly.newPlot(el, spec.data, spec.layout, Object.assign({}, CONFIG, spec.config || {}))
      .then(function () { el.dataset.rendered = "true"; });
  });
})();
