// Charts for the dashboard, drawn as inline SVG through DOM calls (no library, nothing fetched).
// Every label goes in through textContent, so a session key or a reason cannot become markup.
"use strict";

window.clawdCharts = (function () {
  const NS = "http://www.w3.org/2000/svg";

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    for (const c of children) {
      if (c == null) continue;
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return node;
  }

  function title(text) {
    const t = svg("title");
    t.textContent = text;
    return t;
  }

  function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
  }

  function day(ts) {
    const d = new Date(ts * 1000);
    const sameDay = new Date().toDateString() === d.toDateString();
    return sameDay ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
      : d.toLocaleDateString([], { month: "short", day: "numeric" }) + " " +
        d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  }

  // Drawn at the container's own width, so one unit is one pixel and labels keep their size.
  function width(el) {
    return Math.max(320, Math.round(el.clientWidth || 760));
  }

  function signClass(v) {
    return v > 0.05 ? "good" : v < -0.05 ? "bad" : "neutral";
  }

  // The reward trend: mean reward (−1…+1) of consecutive runs of scored turns, oldest left.
  function trend(el, buckets) {
    clear(el);
    const W = width(el), H = 210, L = 40, R = 14, T = 14, B = 30;
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "trend", role: "img",
      "aria-label": "mean reward over time" });
    const y = (v) => T + (1 - (v + 1) / 2) * (H - T - B);
    const n = buckets.length;
    const x = (i) => (n === 1 ? (L + W - R) / 2 : L + (i / (n - 1)) * (W - L - R));
    for (const [v, label] of [[1, "+1"], [0.5, ""], [0, "0"], [-0.5, ""], [-1, "−1"]]) {
      root.appendChild(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: v === 0 ? "axis zero" : "axis" }));
      if (label) root.appendChild(svg("text", { x: L - 8, y: y(v) + 4, class: "tick", "text-anchor": "end" }, label));
    }
    if (!n) {
      root.appendChild(svg("text", { x: W / 2, y: H / 2 - 8, class: "empty", "text-anchor": "middle" },
        "No judged turns yet: the judge scores a turn once the user's next message shows how it went."));
      el.appendChild(root);
      return;
    }
    // the points are the runs' means; the curve, the mean over the last SMOOTH runs (weighted by
    // their turns), so that a few turns of ±1 each read as a trend and not as a zigzag
    const pts = buckets.map((b, i) => [x(i), y(b.mean)]);
    const SMOOTH = 5;
    const curve = buckets.map((b, i) => {
      const win = buckets.slice(Math.max(0, i - SMOOTH + 1), i + 1);
      const turns = win.reduce((s, w) => s + w.n, 0);
      return [x(i), y(win.reduce((s, w) => s + w.mean * w.n, 0) / turns)];
    });
    const area = [[curve[0][0], y(0)], ...curve, [curve[n - 1][0], y(0)]].map((p) => p.join(",")).join(" ");
    root.appendChild(svg("polygon", { points: area, class: "area" }));
    root.appendChild(svg("polyline", { points: curve.map((p) => p.join(",")).join(" "), class: "line" }));
    const most = Math.max(...buckets.map((b) => b.n));
    buckets.forEach((b, i) => {
      const r = 2.5 + 3.5 * Math.sqrt(b.n / most);
      const turns = b.first_turn === b.last_turn ? `turn ${b.first_turn}` : `turns ${b.first_turn}–${b.last_turn}`;
      root.appendChild(svg("circle", { cx: pts[i][0], cy: pts[i][1], r, class: "pt " + signClass(b.mean) },
        title(`${turns} (${day(b.start)} – ${day(b.end)}): mean ${b.mean >= 0 ? "+" : ""}${b.mean.toFixed(2)} over ` +
          `${b.n} turns, ${b.positive} approved, ${b.negative} corrected`)));
    });
    const marks = n === 1 ? [0] : n < 4 ? [0, n - 1] : [0, Math.floor((n - 1) / 2), n - 1];
    for (const i of marks) {
      const anchor = n === 1 ? "middle" : i === 0 ? "start" : i === n - 1 ? "end" : "middle";
      root.appendChild(svg("text", { x: x(i), y: H - 8, class: "tick", "text-anchor": anchor },
        day(i === n - 1 ? buckets[i].end : buckets[i].start)));
    }
    el.appendChild(root);
  }

  // A small diverging bar for a session's mean reward: left red, right green, centre zero.
  function meanBar(mean) {
    const W = 120, H = 14, mid = W / 2;
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "meanbar" });
    root.appendChild(svg("rect", { x: 0, y: 3, width: W, height: H - 6, rx: 4, class: "track" }));
    if (mean != null) {
      const w = Math.abs(mean) * (mid - 2);
      root.appendChild(svg("rect", { x: mean >= 0 ? mid : mid - w, y: 3, width: Math.max(w, 1.5), height: H - 6,
        rx: 3, class: "fill " + signClass(mean) }));
    }
    root.appendChild(svg("line", { x1: mid, x2: mid, y1: 0, y2: H, class: "mid" }));
    return root;
  }

  // The adapter timeline as a strip: one node per version, coloured by what became of it.
  function adapterStrip(el, adapters) {
    clear(el);
    const shown = adapters.slice(-24);
    const W = width(el), H = 70, L = 30, R = 30;
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "strip", role: "img", "aria-label": "adapter versions" });
    const n = shown.length;
    const x = (i) => (n <= 1 ? W / 2 : L + (i / (n - 1)) * (W - L - R));
    root.appendChild(svg("line", { x1: L - 16, x2: W - R + 16, y1: 28, y2: 28, class: "rail" }));
    if (!n) {
      root.appendChild(svg("text", { x: W / 2, y: 56, class: "empty", "text-anchor": "middle" },
        "No adapter yet: the base weights answer. Training makes one once enough scored groups (or judged turns) are ready."));
    }
    shown.forEach((a, i) => {
      const state = a.current ? "live" : a.status;
      const g = svg("g", { class: "node " + state },
        title(`v${a.version}: ${a.current ? "live" : a.status}` + (a.gate && a.gate.summary ? ` — ${a.gate.summary}` : "")));
      if (a.current) g.appendChild(svg("circle", { cx: x(i), cy: 28, r: 13, class: "ring" }));
      g.appendChild(svg("circle", { cx: x(i), cy: 28, r: 8 }));
      if (a.status === "rejected") {
        g.appendChild(svg("path", { d: `M${x(i) - 3.5},24.5 l7,7 M${x(i) + 3.5},24.5 l-7,7`, class: "cross" }));
      }
      g.appendChild(svg("text", { x: x(i), y: 58, "text-anchor": "middle", class: "tick" }, `v${a.version}`));
      root.appendChild(g);
    });
    el.appendChild(root);
  }

  return { trend, meanBar, adapterStrip, day };
})();
