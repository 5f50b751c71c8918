// The dashboard: reads the daemon's JSON endpoints and acts only through its HTTP API (the same
// calls the CLI makes). Model and user text is only ever put in through text nodes: an answer
// holding <script> or <img onerror=…> shows as those characters and does nothing.
"use strict";

(function () {
  const C = window.clawdCharts;
  const $ = (id) => document.getElementById(id);
  const PAGE = 10;

  // el("div", {class: "x", on: {click: f}}, "text", child): strings become text nodes, never markup
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
      else if (k === "class") node.className = v;
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c == null || c === false) continue;
      node.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
    }
    return node;
  }

  function replace(node, ...children) {
    while (node.firstChild) node.removeChild(node.firstChild);
    for (const c of children.flat()) if (c) node.appendChild(c);
  }

  class ApiError extends Error {
    constructor(message, status) { super(message); this.status = status; }
  }

  async function api(path, opts = {}) {
    const init = { method: opts.method || "GET", headers: {}, credentials: "same-origin", cache: "no-store" };
    if (opts.body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(opts.body);
    }
    const r = await fetch(path, init);
    let data = null;
    try { data = await r.json(); } catch (e) { data = null; }
    if (!r.ok) {
      const msg = data && data.error ? data.error.message : `${r.status} ${r.statusText}`;
      throw new ApiError(r.status === 401 ? "The API key is needed: open /?key=YOUR_KEY again." : msg, r.status);
    }
    return data;
  }

  let toastTimer = null;
  function toast(message, kind) {
    const t = $("toast");
    t.textContent = message;
    t.className = "toast " + (kind || "ok");
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { t.className = "toast hidden"; }, 6000);
  }

  // Run an action from a button: disabled while it runs, its outcome in the toast.
  async function act(button, fn, done) {
    button.disabled = true;
    try {
      const out = await fn();
      if (done) toast(typeof done === "function" ? done(out) : done, "ok");
      return out;
    } catch (e) {
      toast(e.message, "error");
      return null;
    } finally {
      button.disabled = false;
    }
  }

  function ago(ts) {
    const s = Math.max(0, Date.now() / 1000 - ts);
    if (s < 60) return `${Math.round(s)}s ago`;
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  }

  function duration(s) {
    if (s < 60) return `${Math.round(s)}s`;
    if (s < 3600) return `${Math.round(s / 60)} min`;
    return `${(s / 3600).toFixed(1)} h`;
  }

  const signed = (v, digits = 2) => (v > 0 ? "+" : v < 0 ? "−" : "") + Math.abs(v).toFixed(digits);
  const verdict = { 1: "👍 +1", 0: "0", "-1": "👎 −1" };

  // -- live state ----------------------------------------------------------------------------
  let status = null;


// GRPO in idle time: groups sampled, the scorer's mode, the last round's advantage spread
function grpoLine(g) {
  if (!g || !g.groups) return "—";
  if (g.k < 2) return "off";
  const c = g.groups, s = g.scorer || {};
  const scorer = s.mode === "trusted" ? "scorer trusted" : s.mode === "untrusted" ? "scorer untrusted: trains nothing"
    : `scorer ${s.mode || "not measured yet"}`;
  const v = g.verdicts;
  const wait = v && Math.min(v.accepted, v.rejected) < v.needed
    ? `; waiting for the user's verdicts (${v.accepted} accepted, ${v.rejected} rejected of ${v.needed} each)`
    : v && v.cv_auc != null && v.cv_auc < v.needed_auc
    ? `; the fit does not see the user's verdicts yet (AUC ${v.cv_auc.toFixed(2)}, ${v.needed_auc.toFixed(2)} needed): no groups until their next one`
    : "";
  const last = g.last_round ? `; last round ${g.last_round.groups} groups, mean |advantage| ${g.last_round.advantage_mean_abs.toFixed(2)}` : "";
  return `${c.sampled} groups sampled, ${c.hindsight} hindsight pairs, ${c.trained} trained on; ${scorer}${wait}${last}`;
}

  function renderStatus(st) {
    status = st;
    const adapter = st.adapter ? `adapter v${st.adapter.version}` : "base weights";
    const busy = st.in_flight > 0 || /^(training|judging|publishing|serving)/.test(st.doing);
    $("live-dot").className = "dot " + (busy ? "busy" : "up");
    $("live-text").textContent = `${st.model.id} · ${adapter} · ${st.doing}`;
    const paused = st.training.paused;
    $("paused-pill").className = paused ? "pill warn" : "pill hidden";
    const toggle = $("learn-toggle");
    toggle.textContent = paused ? "Resume learning" : "Pause learning";
    toggle.disabled = false;
    const c = st.turns;
    const model = st.model.path.split("/").pop();
    const judge = st.judge || {};
    const facts = [
      ["model", `${model}`],
      ["context", `${st.model.context.toLocaleString()} tokens on ${st.device}`],
      ["adapter", st.adapter ? `v${st.adapter.version} (made ${duration(st.adapter.age_s || 0)} ago)` : "none (base weights)"],
      ["doing", `${st.doing} for ${duration(st.doing_since_s)}` + (st.in_flight ? `, ${st.in_flight} request(s) in flight` : "")],
      ["turns", `${c.turns.toLocaleString()} recorded, ${c.judged.toLocaleString()} judged, ` +
        `${c.trained.toLocaleString()} trained on, ${c.feedback.toLocaleString()} with your feedback`],
      ["judge", judge.mode ? judge.mode.replace(/_/g, " ") : "—"],
      ["GRPO", grpoLine(st.grpo)],
      ["learning", paused ? "paused by you: nothing trains or publishes (judging goes on)"
        : st.training.auto ? `on; a round after ${st.training.idle_seconds}s idle` : "auto_learn is off"],
      ["memory", `${Math.round(st.memory_mb)} MB`],
    ];
    replace($("state"), facts.map(([k, v]) => [el("dt", null, k), el("dd", null, v)]).flat());
    const bar = $("progress"), label = $("progress-label");
    const p = st.training.progress;
    if (st.doing.startsWith("training") && p && p.steps) {
      bar.max = p.steps;
      bar.value = p.step || 0;
      label.textContent = `training: step ${p.step || 0} of ${p.steps}` + (p.loss != null ? `, loss ${p.loss.toFixed(4)}` : "");
    } else if (st.doing.startsWith("training")) {
      bar.removeAttribute("value");  // indeterminate: the trainer is loading
      label.textContent = "training: loading the model";
    } else if (!st.training.batch && st.grpo) {  // grpo: only scored groups start a round
      bar.max = st.grpo.wanted;
      bar.value = Math.min(st.grpo.ready, st.grpo.wanted);
      label.textContent = `next round: ${st.grpo.ready} of ${st.grpo.wanted} scored groups ready`;
    } else {
      bar.max = st.training.batch;
      bar.value = Math.min(st.training.ready, st.training.batch);
      label.textContent = `next round: ${st.training.ready} of ${st.training.batch} judged turns ready`;
    }
  }

  // -- adapters ------------------------------------------------------------------------------
  function gateScores(g) {
    const out = [];
    if (g.probes) {
      out.push(`probes ${g.probes.candidate_right}/${g.probes.checked} right (base ${g.probes.base_right})` +
        (g.probes.lost && g.probes.lost.length ? `, lost ${g.probes.lost.join(", ")}` : ""));
    }
    if (g.replay && g.replay.drop != null) {
      out.push(`held-out replay: ${signed(-g.replay.drop, 3)} nats/token vs base on ${g.replay.turns.length} approved turns`);
    } else if (g.replay && g.replay.skipped) {
      out.push(`held-out replay skipped: ${g.replay.skipped}`);
    }
    if (g.kl) out.push(`KL to base ${g.kl.mean.toFixed(3)} nats/token, ${(100 * g.kl.worst_share).toFixed(1)}% of tokens > 2`);
    return out;
  }

  function adapterItem(a) {
    const state = a.current ? "live" : a.status;
    const g = a.gate;
    const gate = !g ? el("p", { class: "gate none" }, a.status === "trained" ? "not through the gate yet" : "no gate results")
      : el("div", { class: "gate " + (g.passed ? "pass" : "fail") },
        el("p", null, g.passed ? "✓ passed the gate" : "✗ rejected by the gate",
          g.seconds != null ? el("span", { class: "muted" }, ` in ${g.seconds.toFixed(0)}s`) : null),
        g.reasons && g.reasons.length ? el("ul", { class: "reasons" }, g.reasons.map((r) => el("li", null, r))) : null,
        el("ul", { class: "scores" }, gateScores(g).map((s) => el("li", null, s))));
    const use = (a.status === "published" || a.status === "retired") && !a.current
      ? el("button", { type: "button", class: "small", "data-version": a.version, on: { click: (e) => adapterAction(e.target, "use", a.version) } }, `Use v${a.version}`)
      : null;
    return el("li", { class: "adapter " + state, "data-version": a.version },
      el("div", { class: "adapter-head" },
        el("span", { class: "version" }, `v${a.version}`),
        el("span", { class: "chip " + state }, state),
        el("span", { class: "muted" }, `${C.day(a.created)}` + (a.parent != null ? ` · from v${a.parent}` : " · from the base") +
          (a.method ? ` · ${a.method}` : "") + (a.turns ? ` · trained on ${a.turns} turns` : "")),
        use),
      gate);
  }

  let lastAdapters = null, lastRewards = null;  // redrawn at the new width when the window resizes

  function renderAdapters(data) {
    lastAdapters = data;
    C.adapterStrip($("adapter-strip"), data.adapters);
    replace($("adapters"), data.adapters.slice().reverse().map(adapterItem));
    $("adapters-sub").textContent = data.current != null ? `live: v${data.current}` : "live: base weights";
    $("rollback").disabled = data.current == null;
    $("adapters-off").disabled = data.current == null;
  }

  async function adapterAction(button, action, version) {
    const out = await act(button, () => api(`/v1/clawd/adapters/${action}`,
      { method: "POST", body: version != null ? { version } : undefined }),
    (d) => d.current != null ? `Now serving adapter v${d.current}.` : "Now serving the base weights.");
    if (out) { renderAdapters(out); refreshStatus(); }
  }

  // -- rewards and sessions ------------------------------------------------------------------
  function renderRewards(data) {
    lastRewards = data;
    C.trend($("trend"), data.buckets);
    $("trend-sub").textContent = data.scored ? `${data.scored.toLocaleString()} judged turns, mean ${signed(data.mean)}` : "";
  }

  const sessions = { pages: [null], at: 0, next: null };

  function sessionRow(s) {
    const label = s.key.length > 22 ? s.key.slice(0, 20) + "…" : s.key;
    return el("tr", { class: s.excluded ? "excluded" : null, "data-session": s.id },
      el("td", null, el("button", { type: "button", class: "link", title: s.key, on: { click: () => showSession(s.id) } },
        `#${s.id} `, el("span", { class: "muted" }, label))),
      el("td", null, ago(s.last_seen)),
      el("td", { class: "num" }, s.turns),
      el("td", { class: "num" }, s.scored),
      el("td", { class: "num" }, s.trained),
      el("td", { class: "meancell" }, C.meanBar(s.mean),
        el("span", { class: "num" }, s.mean == null ? "—" : signed(s.mean)),
        el("span", { class: "muted" }, s.scored ? ` ${s.positive}👍 ${s.negative}👎` : "")),
      el("td", null, excludeButton(s.id, s.excluded)));
  }

  function excludeButton(id, excluded) {
    return el("button", { type: "button", class: "small " + (excluded ? "on" : ""), "data-exclude": id,
      title: excluded ? "Let this session's turns be trained on again" : "Never train on this session's turns",
      on: { click: (e) => setExcluded(e.currentTarget, id, !excluded) } },
    excluded ? "Excluded: include again" : "Exclude from training");
  }

  async function setExcluded(button, id, excluded) {
    const out = await act(button, () => api(`/v1/clawd/sessions/${id}/${excluded ? "exclude" : "include"}`, { method: "POST" }),
      excluded ? `Session ${id} is excluded from training.` : `Session ${id} may be trained on again.`);
    if (out) { refreshSessions(); refreshTurns(); refreshStatus(); }
  }

  async function refreshSessions() {
    const before = sessions.pages[sessions.at];
    const data = await api(`/v1/clawd/sessions?limit=8${before != null ? `&before=${before}` : ""}`);
    replace($("sessions"), data.data.length ? data.data.map(sessionRow)
      : [el("tr", null, el("td", { colspan: 7, class: "muted" }, "No sessions recorded yet."))]);
    sessions.next = data.next_before;
    $("sessions-older").disabled = data.next_before == null;
    $("sessions-newer").disabled = sessions.at === 0;
  }

  // -- turns ---------------------------------------------------------------------------------
  const turns = { pages: [null], at: 0, next: null, session: null };

  // Blank lines at the ends, and runs of more than one inside, take room and say nothing (small
  // models emit dozens); otherwise the text is shown exactly as recorded.
  const shown = (text) => (text || "").replace(/^\s+|\s+$/g, "").replace(/\n{3,}/g, "\n\n");

  function block(label, text, cut, cls) {
    return el("div", { class: "block " + (cls || "") },
      el("div", { class: "label" }, label),
      el("div", { class: "text" }, shown(text) || el("span", { class: "muted" }, "(empty)")),
      cut ? el("div", { class: "muted cut" }, "… cut here; the full text is in the database") : null);
  }

  function turnCard(t) {
    const comment = el("input", { type: "text", class: "comment", placeholder: "What should it have done? (optional; becomes the hint)",
      maxlength: 2000, "aria-label": `comment on turn ${t.id}` });
    const badges = [
      t.kind === "side" ? el("span", { class: "chip side" }, "side") : null,
      t.status !== "ok" ? el("span", { class: "chip bad" }, t.status) : null,
      el("span", { class: "chip", title: "what answered it" }, t.adapter_version != null ? `served by v${t.adapter_version}` : "served by the base"),
      t.trained ? el("span", { class: "chip trained" }, "trained on") : null,
      t.session_excluded ? el("span", { class: "chip warn" }, "session excluded") : null,
      t.judge_score != null ? el("span", { class: "chip judge s" + t.judge_score }, `judge ${verdict[t.judge_score]}`) : null,
      t.feedback_score != null ? el("span", { class: "chip you s" + t.feedback_score }, `you ${verdict[t.feedback_score]}`) : null,
    ];
    const calls = t.tool_calls.map((c) => el("div", { class: "call" }, `→ ${c.name}(${c.arguments})`));
    return el("article", { class: "turn", "data-turn": t.id, "data-completion": t.completion_id },
      el("header", null,
        el("span", { class: "turn-id" }, `#${t.id}`),
        el("button", { type: "button", class: "link", on: { click: () => showSession(t.session_id) } },
          `session ${t.session_id} · turn ${t.index + 1}`),
        el("span", { class: "muted" }, ago(t.created)), badges),
      el("div", { class: "blocks" },
        block("user", t.user, t.truncated.includes("user"), "user"),
        el("div", { class: "block answer" }, el("div", { class: "label" }, "answer"),
          el("div", { class: "text" }, shown(t.answer) || (calls.length ? null : el("span", { class: "muted" }, "(empty)"))), calls,
          t.truncated.includes("answer") ? el("div", { class: "muted cut" }, "… cut here") : null),
        t.next_role ? block(`next (${t.next_role})`, t.next_state, t.truncated.includes("next_state"), "next")
          : el("div", { class: "block next" }, el("div", { class: "label" }, "next"),
            el("div", { class: "muted" }, "nothing came after it yet"))),
      t.judge_hint ? el("p", { class: "hint" }, el("b", null, "judge's hint: "), t.judge_hint) : null,
      t.feedback_comment ? el("p", { class: "hint yours" }, el("b", null, "your comment: "), t.feedback_comment,
        el("span", { class: "muted" }, t.feedback_hint ? " (kept as the hint)" : " (not used as a hint)")) : null,
      el("footer", null,
        el("button", { type: "button", class: "thumb up", title: "Good answer", "data-score": "1",
          on: { click: (e) => feedback(e.currentTarget, t, 1, comment) } }, "👍"),
        el("button", { type: "button", class: "thumb down", title: "Bad answer", "data-score": "-1",
          on: { click: (e) => feedback(e.currentTarget, t, -1, comment) } }, "👎"),
        comment, excludeButton(t.session_id, t.session_excluded)));
  }

  async function feedback(button, t, score, input) {
    const text = input.value.trim();
    const out = await act(button, () => api("/v1/feedback", { method: "POST",
      body: { id: t.completion_id, score, comment: text || null } }),
    (d) => `Saved ${score > 0 ? "👍" : "👎"} on turn ${t.id}` + (d.hint ? "; your comment is its hint." :
      d.hint_refused ? `; comment kept, not as a hint: ${d.hint_refused}` : "."));
    if (out) { input.value = ""; refreshTurns(true); refreshRewards(); refreshSessions(); }
  }

  function showSession(id) {
    turns.session = id;
    turns.pages = [null];
    turns.at = 0;
    refreshTurns(true);
  }

  function editing() {
    const active = document.activeElement;
    return [...document.querySelectorAll("input.comment")].some((i) => i.value || i === active);
  }

  async function refreshTurns(force) {
    if (!force && editing()) return;  // a timer must not wipe a comment being written
    const before = turns.pages[turns.at];
    const q = [`limit=${PAGE}`, before != null ? `before=${before}` : null, turns.session != null ? `session=${turns.session}` : null];
    const data = await api("/v1/clawd/turns?" + q.filter(Boolean).join("&"));
    replace($("turns"), data.data.length ? data.data.map(turnCard) : [el("p", { class: "muted" }, "No turns recorded yet.")]);
    turns.next = data.next_before;
    $("turns-older").disabled = data.next_before == null;
    $("turns-newer").disabled = turns.at === 0;
    const sub = $("turns-sub");
    replace(sub, turns.session == null ? [document.createTextNode("newest first")]
      : [document.createTextNode(`session ${turns.session} `),
        el("button", { type: "button", class: "link", on: { click: () => showSession(null) } }, "show all")]);
  }

  // -- wiring --------------------------------------------------------------------------------
  async function refreshStatus() { renderStatus(await api("/v1/clawd/status")); }
  async function refreshAdapters() { renderAdapters(await api("/v1/clawd/adapters")); }
  async function refreshRewards() { renderRewards(await api("/v1/clawd/rewards?buckets=40")); }

  function pager(state, olderId, newerId, refresh) {
    $(olderId).addEventListener("click", () => {
      if (state.next == null) return;
      state.pages = state.pages.slice(0, state.at + 1).concat([state.next]);
      state.at += 1;
      refresh(true);
    });
    $(newerId).addEventListener("click", () => {
      if (state.at > 0) { state.at -= 1; refresh(true); }
    });
  }

  // Poll without overlapping: the next round starts when this one has answered.
  function every(ms, fn) {
    const run = async () => {
      try { await fn(); $("live").classList.remove("down"); } catch (e) {
        $("live").classList.add("down");
        $("live-text").textContent = e instanceof ApiError ? e.message : "daemon unreachable; retrying";
      }
      setTimeout(run, ms);
    };
    setTimeout(run, ms);
  }

  async function start() {
    $("learn-toggle").addEventListener("click", async (e) => {
      const pause = !(status && status.training.paused);
      const out = await act(e.currentTarget, () => api(`/v1/clawd/learning/${pause ? "pause" : "resume"}`, { method: "POST" }),
        pause ? "Learning paused: no training or publishing until you resume." : "Learning resumed.");
      if (out) refreshStatus();
    });
    $("rollback").addEventListener("click", (e) => adapterAction(e.currentTarget, "rollback"));
    $("adapters-off").addEventListener("click", (e) => adapterAction(e.currentTarget, "off"));
    $("turns-refresh").addEventListener("click", () => refreshTurns(true));
    let resizing = null;
    window.addEventListener("resize", () => {
      clearTimeout(resizing);
      resizing = setTimeout(() => {
        if (lastRewards) C.trend($("trend"), lastRewards.buckets);
        if (lastAdapters) C.adapterStrip($("adapter-strip"), lastAdapters.adapters);
      }, 150);
    });
    pager(turns, "turns-older", "turns-newer", refreshTurns);
    pager(sessions, "sessions-older", "sessions-newer", refreshSessions);
    try {
      await Promise.all([refreshStatus(), refreshAdapters(), refreshRewards(), refreshSessions(), refreshTurns(true)]);
    } catch (e) {
      toast(e.message, "error");
    }
    document.body.dataset.ready = "1";  // the first full render is done (the browser tests wait for it)
    every(3000, refreshStatus);
    every(15000, () => Promise.all([refreshAdapters(), refreshRewards(), refreshSessions(), refreshTurns(false)]));
  }

  start();
})();
