// The overview's live chart: polls /api/overview every second and draws the
// produce->ack p50 and p99 of each interval (from the difference of two cumulative
// histograms, so each point is an upper bound: the bound of the bucket holding it).
"use strict";
(function () {
  const chart = document.getElementById("chart");
  const text = document.getElementById("live-text");
  if (!chart) return;
  const keep = 120;
  const points = []; // {p50, p99, mbps}
  let last = null;

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

  function draw() {
    const max = Math.max(1, ...points.map((p) => (isFinite(p.p99) ? p.p99 : 0)));
    const line = (key) => points
      .map((p, i) => [i * (600 / (keep - 1)), 200 - 190 * Math.min(1, (p[key] || 0) / max)])
      .map(([x, y]) => x.toFixed(1) + "," + y.toFixed(1)).join(" ");
    chart.innerHTML =
      '<polyline class="p50" points="' + line("p50") + '"/>' +
      '<polyline class="p99" points="' + line("p99") + '"/>';
    chart.setAttribute("data-points", String(points.length));
    return max;
  }

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
          top = draw();
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
})();
