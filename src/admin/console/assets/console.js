// The console's live charts.
// Overview: polls /api/overview every second and draws the produce->ack p50 and p99 of
// each interval (from the difference of two cumulative histograms, so each point is an
// upper bound: the bound of the bucket holding it).
// Group page: polls /api/groups/NAME every 5 s and draws the group's total lag.
"use strict";
(function () {
  // Draws one polyline per key of `points` into `svg` (600 x 200), scaled to the largest
  // finite value of `scaleKey`; returns that top value.
  function drawLines(svg, points, keys, scaleKey, keep) {
    const max = Math.max(1, ...points.map((p) => (isFinite(p[scaleKey]) ? p[scaleKey] : 0)));
    const line = (key) => points
      .map((p, i) => [i * (600 / (keep - 1)), 200 - 190 * Math.min(1, (p[key] || 0) / max)])
      .map(([x, y]) => x.toFixed(1) + "," + y.toFixed(1)).join(" ");
    svg.innerHTML = keys.map((k) => '<polyline class="' + k + '" points="' + line(k) + '"/>').join("");
    svg.setAttribute("data-points", String(points.length));
    return max;
  }

  // The upper bound of the q-quantile of the values counted between two snapshots.
  function quantile(before, now, q) {
    if (!now || !before) return null;
    const n = now.count - before.count;
    if (n <= 0) return null;
    const rank = Math.max(1, Math.ceil(n * q));
    for (let i = 0; i < now.cumulative.length; i++) {
      if (now.cumulative[i][1] - before.cumulative[i][1] >= rank) return now.cumulative[i][0];
    }
    return Infinity; // above every bound
  }

  function overview(chart, text) {
    const keep = 120;
    const points = []; // {p50, p99, mbps}
    let last = null;
    async function poll() {
      try {
        const now = await (await fetch("/api/overview", { cache: "no-store" })).json();
        if (last && now.time_ms > last.time_ms) {
          const secs = (now.time_ms - last.time_ms) / 1000;
          const p50 = quantile(last.produce_us, now.produce_us, 0.5);
          const p99 = quantile(last.produce_us, now.produce_us, 0.99);
          const mbps = (now.produce_bytes - last.produce_bytes) / secs / 1e6;
          let top = null;
          if (p50 !== null) {
            points.push({ p50: p50, p99: p99, mbps: mbps });
            if (points.length > keep) points.shift();
            top = drawLines(chart, points, ["p50", "p99"], "p99", keep);
          }
          const shown = (v) => (v === null ? "-" : isFinite(v) ? "≤ " + v + " µs" : "above 5 s");
          text.textContent = "produce→ack p50 " + shown(p50) + ", p99 " + shown(p99) +
            "; produced " + mbps.toFixed(2) + " MB/s (last " + secs.toFixed(1) + " s; " +
            points.length + " points" +
            (top === null ? "" : "; chart: p50 blue, p99 red, top " + top + " µs") + ")";
        }
        last = now;
      } catch (e) {
        text.textContent = "polling failed: " + e;
      }
      setTimeout(poll, 1000);
    }
    poll();
  }

  function groupLag(chart, text) {
    const keep = 120; // 10 minutes of 5 s points
    const points = []; // {lag}
    async function poll() {
      try {
        const now = await (await fetch(chart.getAttribute("data-api"), { cache: "no-store" })).json();
        points.push({ lag: now.total_lag });
        if (points.length > keep) points.shift();
        const top = drawLines(chart, points, ["lag"], "lag", keep);
        text.textContent = "total lag " + now.total_lag + " (" + now.state + ", " + now.members +
          " members; " + points.length + " points; chart top " + top + ")";
      } catch (e) {
        text.textContent = "polling failed: " + e;
      }
      setTimeout(poll, 5000);
    }
    poll();
  }

  const chart = document.getElementById("chart");
  if (chart) overview(chart, document.getElementById("live-text"));
  const lag = document.getElementById("lag-chart");
  if (lag) groupLag(lag, document.getElementById("lag-text"));
})();
