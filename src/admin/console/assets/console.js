// The console's live charts.
// Overview: polls /api/overview every second and draws the produce->ack and fdatasync p50
// and p99 of each interval (from the difference of two cumulative histograms, so each
// point is an upper bound: the bound of the bucket holding it).
// Topics page: polls /api/topics?page=N every 5 s and fills each topic's produce and
// fetch rates (bytes per second over the interval).
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

  function overview(charts, text) {
    const keep = 120;
    const points = { produce: [], fsync: [] }; // {p50, p99} per interval
    let last = null;
    // Adds the interval's p50 and p99 of histogram `key` to its chart; the p50, or null
    // when nothing was counted in the interval.
    function addPoint(now, name, key) {
      const p50 = quantile(last[key], now[key], 0.5);
      if (p50 === null) return { p50: null, p99: null, top: null };
      const p99 = quantile(last[key], now[key], 0.99);
      points[name].push({ p50: p50, p99: p99 });
      if (points[name].length > keep) points[name].shift();
      return { p50: p50, p99: p99, top: drawLines(charts[name], points[name], ["p50", "p99"], "p99", keep) };
    }
    async function poll() {
      try {
        const now = await (await fetch("/api/overview", { cache: "no-store" })).json();
        if (last && now.time_ms > last.time_ms) {
          const secs = (now.time_ms - last.time_ms) / 1000;
          const produce = addPoint(now, "produce", "produce_us");
          const fsync = addPoint(now, "fsync", "fsync_us");
          const mbps = (bytes) => ((now[bytes] - last[bytes]) / secs / 1e6).toFixed(2) + " MB/s";
          const shown = (v) => (v === null ? "-" : isFinite(v) ? "≤ " + v + " µs" : "above 5 s");
          text.textContent = "produce→ack p50 " + shown(produce.p50) + ", p99 " + shown(produce.p99) +
            "; fdatasync p50 " + shown(fsync.p50) + ", p99 " + shown(fsync.p99) +
            "; produced " + mbps("produce_bytes") + ", fetched " + mbps("fetch_bytes") +
            " (last " + secs.toFixed(1) + " s; " + points.produce.length + " points" +
            (produce.top === null ? "" : "; produce→ack chart top " + produce.top + " µs") +
            (fsync.top === null ? "" : "; fdatasync chart top " + fsync.top + " µs") + ")";
        }
        last = now;
      } catch (e) {
        text.textContent = "polling failed: " + e;
      }
      setTimeout(poll, 1000);
    }
    poll();
  }

  function topicRates(api, cells) {
    let last = null;
    async function poll() {
      try {
        const now = await (await fetch(api, { cache: "no-store" })).json();
        if (last && now.time_ms > last.time_ms) {
          const secs = (now.time_ms - last.time_ms) / 1000;
          const before = new Map(last.topics.map((t) => [t.topic, t]));
          const current = new Map(now.topics.map((t) => [t.topic, t]));
          for (const cell of cells) {
            const name = cell.getAttribute("data-topic");
            const kind = cell.getAttribute("data-kind") + "_bytes";
            const a = before.get(name), b = current.get(name);
            cell.textContent = a && b ? Math.round((b[kind] - a[kind]) / secs).toString() : "-";
          }
        }
        last = now;
      } catch (e) {
        for (const cell of cells) cell.textContent = "polling failed";
      }
      setTimeout(poll, 5000);
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
  if (chart) {
    const charts = { produce: chart, fsync: document.getElementById("fsync-chart") };
    overview(charts, document.getElementById("live-text"));
  }
  const topicsApi = document.getElementById("topics-api");
  if (topicsApi) topicRates(topicsApi.getAttribute("href"), document.querySelectorAll("span.rate"));
  const lag = document.getElementById("lag-chart");
  if (lag) groupLag(lag, document.getElementById("lag-text"));
})();
