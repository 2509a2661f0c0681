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
  document.querySelectorAll("[data-figure]").forEach(function (el) {
    var spec = JSON.parse(document.getElementById(el.dataset.figure).textContent);
    fitTitle(spec.layout, el.clientWidth);
    Plotly.newPlot(el, spec.data, spec.layout, {responsive: true, displaylogo: false})
      .then(function () { el.dataset.rendered = "true"; });
  });
})();
