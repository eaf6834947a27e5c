// annal console: keeps a page current without reloading it.
// Every few seconds: the banner from /api/health, the page's #live section
// (the server renders it again with ?partial=1, escaped as the page was), and
// each chart (div.chart[data-series]) from the sampler's JSON series.
"use strict";
(function () {
  const PERIOD_MS = 3000;
  const live = document.getElementById("live");
  const banner = document.getElementById("banner");
  const bannerText = document.getElementById("banner-text");
  const updated = document.getElementById("updated");

  async function getJSON(url) {
    const response = await fetch(url, { headers: { Accept: "application/json" } });
    return response.json();
  }

  async function health() {
    try {
      const h = await getJSON("/api/health");
      if (h.ok) {
        banner.hidden = true;
      } else {
        bannerText.textContent = h.error;
        banner.hidden = false;
      }
    } catch (e) {
      bannerText.textContent = "the console itself does not answer";
      banner.hidden = false;
    }
  }

  async function refreshLive() {
    if (!live || live.dataset.refresh === "0") return;
    const url = new URL(window.location.href);
    url.searchParams.set("partial", "1");
    url.searchParams.delete("notice");
    try {
      const response = await fetch(url);
      if (response.ok) {
        live.innerHTML = await response.text();
        const stale = document.getElementById("page-error");
        if (stale) stale.hidden = true;
      }
    } catch (e) { /* the banner says so */ }
  }

  async function drawCharts() {
    if (typeof Plotly === "undefined") return;
    for (const div of document.querySelectorAll("div.chart[data-series]")) {
      try {
        const series = await getJSON(div.dataset.series);
        if (series.error) continue;
        const traces = series.traces.map((t) => ({
          x: t.x.map((ms) => new Date(ms)), y: t.y, name: t.name,
          type: "scatter", mode: "lines", line: { width: 2, color: "#2563eb" },
          fill: "tozeroy", fillcolor: "rgba(37,99,235,0.08)",
        }));
        Plotly.react(div, traces, {
          title: { text: series.title, font: { size: 14 } },
          margin: { l: 50, r: 20, t: 40, b: 40 }, height: 260,
          xaxis: { type: "date" }, yaxis: { rangemode: "tozero" },
          paper_bgcolor: "#fff", plot_bgcolor: "#fff", showlegend: false,
        }, { displayModeBar: false, responsive: true });
        div.dataset.points = String(traces.length ? traces[0].y.length : 0);
      } catch (e) { /* drawn next time */ }
    }
  }

  let busy = false;  // one round at a time: a slow cluster must not pile requests up
  async function tick() {
    if (busy) return;
    busy = true;
    try {
      await Promise.all([health(), refreshLive(), drawCharts()]);
      if (updated) updated.textContent = "updated " + new Date().toLocaleTimeString();
    } finally {
      busy = false;
    }
  }

  drawCharts();
  health();
  setInterval(tick, PERIOD_MS);
})();
