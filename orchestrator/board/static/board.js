// team board: the page. Vanilla JS, no build step, no dependency.
//
// Data arrives on one server-sent-event stream (/api/events): a "snapshot",
// then "delta"s in version order (see orchestrator/board/feed.py). Every
// string from the server is untrusted (subjects, messages, job output): it is
// only ever set with textContent or as an attribute value, never as markup.
//
// The graph: one absolutely positioned card per task, at (wave, row) from the
// server's layout; edges are two or three SVG paths, each one "d" string for
// all its edges, so 1,000 tasks cost a few thousand DOM nodes. In a wave whose
// tasks all completed, or a wave of more than FOLD_LIMIT tasks, the completed
// cards are folded into one button (they stay in the DOM, hidden).
"use strict";
(() => {
  const FOLD_LIMIT = 40, FOLD_MIN = 4;
  const CARD_W = 210, CARD_H = 44, COL_W = 270, ROW_H = 52, HEAD_H = 26;
  const token = new URLSearchParams(location.search).get("token") || "";
  const $ = (id) => document.getElementById(id);
  const S = {
    version: 0, skew: 0, actions: false, tasks: new Map(), cards: new Map(), folds: new Map(), heads: new Map(),
    expanded: new Set(), selected: null, chain: new Set(), critical: [], members: [], detailsTimer: null,
    leadAlive: false, progress: null,
  };
  window.boardStats = { loadedAt: performance.now(), firstRender: null, deltas: 0, lastDeltaMs: null };

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  const now = () => Date.now() / 1000 + S.skew;
  function dur(s) {
    if (s === null || s === undefined || !isFinite(s)) return "";
    s = Math.max(0, s);
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + Math.round(s % 60) + "s";
    return Math.floor(s / 3600) + "h " + Math.round((s % 3600) / 60) + "m";
  }
  // as core/budget.py money(): cents from $1 up, below that 3 significant digits (never "$0.00" for a spend)
  const dollars = (c) => {
    if (c === 0) return "$0.00";
    if (Math.abs(c) >= 1) return "$" + c.toLocaleString("en-US", {minimumFractionDigits: 2, maximumFractionDigits: 2});
    const places = Math.max(2, -Math.floor(Math.log10(Math.abs(c))) + 2);
    const [whole, frac] = c.toFixed(places).split(".");
    return "$" + whole + "." + frac.replace(/0+$/, "").padEnd(2, "0");
  };
  const money = (c) => (c === null || c === undefined) ? "cost unknown" : dollars(c);
  const clock = (ts) => new Date(ts * 1000).toLocaleTimeString([], { hour12: false });
  const api = (path) => path + (path.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(token);

  // ------------------------------------------------------------------ the stream
  function connect() {
    const es = new EventSource(api("/api/events"));
    es.addEventListener("snapshot", (e) => applySnapshot(JSON.parse(e.data)));
    es.addEventListener("delta", (e) => applyDelta(JSON.parse(e.data)));
    es.addEventListener("problem", (e) => showProblem(JSON.parse(e.data).problem));
    es.addEventListener("end", (e) => {
      es.close();  // the server is going away: keep the last state, do not reconnect
      showProblem("The board stopped: " + JSON.parse(e.data).reason + ". This page shows the last state.");
      $("live").textContent = "stopped";
      $("live").className = "pill";
    });
    es.onopen = () => setLive(true);
    es.onerror = () => setLive(false);
  }
  function setLive(on) {
    const live = $("live");
    live.textContent = on ? "live" : "reconnecting…";
    live.className = "pill " + (on ? "on" : "off");
  }
  function showProblem(text) {
    $("problem").hidden = !text;
    $("problem").textContent = text || "";
  }

  function applySnapshot(snap) {
    S.version = snap.version;
    S.skew = snap.now - Date.now() / 1000;
    S.actions = snap.actions;
    S.tasks = new Map(snap.tasks.map((t) => [t.id, t]));
    for (const card of S.cards.values()) card.remove();
    S.cards.clear();
    document.title = "team board: " + snap.root;
    renderLead(snap.lead);
    renderProgress(snap.progress);
    S.members = snap.members; renderMembers();
    renderSpend(snap.spend);
    renderJobs(snap.jobs);
    $("messages").replaceChildren(); addMessages(snap.messages);
    $("activity").replaceChildren(); addActivity(snap.activity);
    renderUnreadable(snap.unreadable);
    $("send").hidden = !S.actions;
    if (S.selected !== null) S.chain = chainOf(S.selected);
    renderGraph(null, null);
    document.body.dataset.version = String(S.version);
    if (window.boardStats.firstRender === null) {
      window.boardStats.firstRender = performance.now();
      document.body.dataset.ready = "1";
      showWork();
    }
    if (S.selected !== null) loadDetails(S.selected);
  }

  function applyDelta(d) {
    const t0 = performance.now();
    S.version = d.version;
    S.skew = d.now - Date.now() / 1000;
    const updated = new Set(), moved = new Set();
    for (const t of d.tasks || []) {
      const old = S.tasks.get(t.id);
      S.tasks.set(t.id, t);
      updated.add(t.id);
      if (!old || old.state !== t.state) moved.add(t.id);
    }
    if (S.selected !== null && moved.size) {
      const chain = chainOf(S.selected);
      if (chain.size !== S.chain.size || [...chain].some((i) => !S.chain.has(i))) {
        for (const i of S.chain) updated.add(i);
        for (const i of chain) updated.add(i);
        S.chain = chain;
      }
    }
    for (const id of d.removed || []) {
      S.tasks.delete(id);
      const card = S.cards.get(id);
      if (card) { card.remove(); S.cards.delete(id); }
    }
    if (d.lead) renderLead(d.lead);
    if (d.progress || d.lead) renderProgress(d.progress || S.progress);
    if (d.members) { S.members = d.members; renderMembers(); }
    if (d.spend) renderSpend(d.spend);
    if (d.jobs) renderJobs(d.jobs);
    if (d.messages) addMessages(d.messages);
    if (d.activity) addActivity(d.activity);
    if (d.unreadable) renderUnreadable(d.unreadable);
    if (d.tasks || d.removed) renderGraph(updated, moved);
    document.body.dataset.version = String(S.version);
    window.boardStats.deltas += 1;
    window.boardStats.lastDeltaMs = performance.now() - t0;
    if (S.selected !== null && (d.tasks || []).some((t) => t.id === S.selected || S.chain.has(t.id))) {
      clearTimeout(S.detailsTimer);
      S.detailsTimer = setTimeout(() => loadDetails(S.selected), 150);
    }
  }

  // ------------------------------------------------------------------ header
  function renderLead(lead) {
    const e = $("lead");
    S.leadAlive = lead.alive;
    if (lead.alive) {
      e.textContent = "lead: running" + (lead.pid ? " (pid " + lead.pid + ")" : "") +
        (lead.plan ? " · plan " + lead.plan : "") + (lead.mode ? " · " + lead.mode : "");
      e.className = "pill on";
    } else {
      e.textContent = "lead: not running";
      e.className = "pill";
    }
  }

  function renderProgress(p) {
    if (!p) return;
    S.progress = p;
    const c = p.counts, total = Math.max(1, p.total);
    const bar = $("bar");
    bar.replaceChildren();
    for (const [key, n] of [["completed", c.completed], ["running", c.in_progress], ["failed", c.failed], ["cancelled", c.cancelled]]) {
      if (!n) continue;
      const seg = el("span", key);
      seg.style.width = (100 * n / total) + "%";
      bar.append(seg);
    }
    const bits = [p.done + "/" + p.total + " done"];
    if (c.in_progress) bits.push(c.in_progress + " running");
    if (c.failed) bits.push(c.failed + " failed");
    if (c.cancelled) bits.push(c.cancelled + " cancelled");
    if (c.pending) bits.push(c.pending + " pending (" + p.ready + " ready, " + p.blocked + " blocked)");
    if (S.leadAlive && p.first_start && p.left) bits.push(dur(now() - p.first_start) + " elapsed");
    if (S.leadAlive && p.eta !== null && p.eta !== undefined) bits.push("ETA ~" + dur(p.eta));
    $("progress-text").textContent = bits.join(" · ");
    S.critical = p.critical || [];
    $("critical-text").textContent = S.critical.length
      ? "critical path (" + p.critical_kind + "): " + S.critical.map((i) => "#" + i).join(" → ") : "";
  }

  function renderSpend(s) {
    const e = $("spend");
    e.replaceChildren();
    if (!s) return;
    const tokens = s.prompt_tokens + s.completion_tokens;
    let text = "spend: " + (s.calls ? money(s.cost) + " · " + tokens.toLocaleString() + " tokens" : "no model calls");
    if (s.budget !== null && s.budget !== undefined) {
      const pct = s.cost ? 100 * s.cost / s.budget : 0;
      text += " of " + dollars(s.budget) + " budget (" + pct.toFixed(0) + "%)";
      const m = el("meter");
      m.min = 0; m.max = s.budget; m.value = Math.min(s.cost || 0, s.budget); m.high = 0.8 * s.budget;
      e.append(el("span", null, text + " "), m);
    } else {
      e.textContent = text;
    }
  }

  function renderUnreadable(bad) {
    const names = Object.keys(bad || {});
    if (names.length) showProblem("unreadable task files (run `team doctor`): " + names.map((n) => n + ": " + bad[n]).join("; "));
    else if ($("problem").textContent.startsWith("unreadable")) showProblem(null);
  }

  // ------------------------------------------------------------------ the graph
  function cardText(card, t) {
    card.className = "card st-" + t.state + (t.crit ? " crit" : "") + (S.chain.has(t.id) ? " chain" : "") +
      (S.selected === t.id ? " sel" : "");
    const l1 = card.firstChild, l2 = card.lastChild;
    l1.children[0].textContent = (t.crit ? "◆ " : "") + t.marker;
    l1.children[1].textContent = " #" + t.id + " ";
    l1.children[2].textContent = t.subject;
    l2.textContent = secondLine(t);
    card.title = "#" + t.id + (t.name ? " " + t.name : "") + ": " + t.subject;
    card.setAttribute("aria-label", "#" + t.id + " " + t.subject + ": " + t.state + (t.crit ? ", on the critical path" : ""));
    card.dataset.state = t.state;
  }
  function secondLine(t) {
    const bits = [t.state];
    if (t.owner) bits.push(t.owner);
    if (t.attempts > 1) bits.push(t.attempts + " attempts");
    if (t.started) bits.push(dur((t.finished || now()) - t.started));
    if (t.cost !== null && t.cost !== undefined) bits.push(money(t.cost));
    if (t.state === "blocked" && t.waiting.length) bits.push("waits on " + t.waiting.slice(0, 3).map((i) => "#" + i).join(", ") + (t.waiting.length > 3 ? "…" : ""));
    return bits.join(" · ");
  }
  function newCard(t) {
    const card = el("div", "card");
    card.tabIndex = 0;
    card.setAttribute("role", "button");
    card.dataset.id = String(t.id);
    const l1 = el("div", "l1");
    l1.append(el("span", "mk"), el("span", "tid"), el("span", "subj"));
    card.append(l1, el("div", "l2"));
    $("nodes").append(card);
    S.cards.set(t.id, card);
    return card;
  }

  function columns() {
    const cols = new Map();
    for (const t of S.tasks.values()) {
      if (!cols.has(t.col)) cols.set(t.col, []);
      cols.get(t.col).push(t);
    }
    for (const list of cols.values()) list.sort((a, b) => a.row - b.row || a.id - b.id);
    return [...cols.entries()].sort((a, b) => a[0] - b[0]);
  }

  // updated: ids whose view changed (null: every card, e.g. the selection moved);
  // moved: ids whose state changed, stamped with the time the page showed it (data-changed)
  function renderGraph(updated, moved) {
    const pos = new Map();  // task id -> [x, y] of the element that stands for it (card or fold)
    const seenFolds = new Set(), seenHeads = new Set();
    let maxX = 0, maxY = 0;
    for (const [col, list] of columns()) {
      const x = col * COL_W;
      let y = HEAD_H;
      const head = S.heads.get(col) || (() => { const h = el("div", "col-head"); $("nodes").append(h); S.heads.set(col, h); return h; })();
      const done = list.filter((t) => t.status === "completed");
      const foldable = (done.length >= FOLD_MIN && done.length === list.length) || (done.length > 0 && list.length > FOLD_LIMIT);
      const folded = foldable && !S.expanded.has(col);
      head.textContent = "wave " + (col + 1) + " · " + list.length + " task" + (list.length === 1 ? "" : "s");
      head.style.left = x + "px"; head.style.top = "0px";
      seenHeads.add(col);
      if (foldable) {
        let fold = S.folds.get(col);
        if (!fold) {
          fold = el("button", "fold");
          fold.type = "button";
          fold.addEventListener("click", () => {
            if (S.expanded.has(col)) S.expanded.delete(col); else S.expanded.add(col);
            renderGraph(new Set(), null);
          });
          $("nodes").append(fold);
          S.folds.set(col, fold);
        }
        fold.textContent = (folded ? "▸ [x] " : "▾ [x] ") + done.length + " completed" + (folded ? " (show)" : " (fold)");
        fold.setAttribute("aria-expanded", folded ? "false" : "true");
        fold.style.left = x + "px"; fold.style.top = y + "px";
        seenFolds.add(col);
        if (folded) for (const t of done) pos.set(t.id, [x, y, true]);
        y += ROW_H;
      }
      for (const t of list) {
        let card = S.cards.get(t.id);
        const hide = folded && t.status === "completed";
        if (!card) { card = newCard(t); cardText(card, t); }
        else if (!updated || updated.has(t.id)) cardText(card, t);
        if (moved && moved.has(t.id)) card.dataset.changed = String(Date.now());
        card.hidden = hide;
        if (hide) continue;
        const left = x + "px", top = y + "px";
        if (card.style.left !== left) card.style.left = left;
        if (card.style.top !== top) card.style.top = top;
        pos.set(t.id, [x, y, false]);
        y += ROW_H;
      }
      maxX = Math.max(maxX, x + CARD_W);
      maxY = Math.max(maxY, y);
    }
    for (const [col, fold] of S.folds) if (!seenFolds.has(col)) { fold.remove(); S.folds.delete(col); }
    for (const [col, head] of S.heads) if (!seenHeads.has(col)) { head.remove(); S.heads.delete(col); }
    const graph = $("graph"), svg = $("edges");
    graph.style.width = maxX + "px"; graph.style.height = maxY + "px";
    svg.setAttribute("width", String(maxX)); svg.setAttribute("height", String(maxY));
    drawEdges(pos);
    $("empty").hidden = S.tasks.size > 0;
  }

  function drawEdges(pos) {
    const all = [], crit = [], chain = [];
    const critPairs = new Set();
    for (let i = 1; i < S.critical.length; i++) critPairs.add(S.critical[i - 1] + ">" + S.critical[i]);
    const seen = new Set();
    for (const t of S.tasks.values()) {
      const to = pos.get(t.id);
      if (!to) continue;
      for (const d of t.deps) {
        const from = pos.get(d);
        if (!from) continue;
        const key = from[0] + "," + from[1] + ">" + to[0] + "," + to[1];
        if (seen.has(key)) continue;
        seen.add(key);
        const x1 = from[0] + CARD_W, y1 = from[1] + CARD_H / 2, x2 = to[0], y2 = to[1] + CARD_H / 2;
        const dx = Math.max(20, (x2 - x1) / 2);
        const seg = "M" + x1 + " " + y1 + "C" + (x1 + dx) + " " + y1 + " " + (x2 - dx) + " " + y2 + " " + x2 + " " + y2;
        if (critPairs.has(d + ">" + t.id)) crit.push(seg);
        else if (S.chain.has(t.id) && S.chain.has(d)) chain.push(seg);
        else all.push(seg);
      }
    }
    $("e-all").setAttribute("d", all.join(""));
    $("e-chain").setAttribute("d", chain.join(""));
    $("e-crit").setAttribute("d", crit.join(""));
  }

  // on opening: scroll to the first wave with work left, if it is out of sight
  function showWork() {
    let first = null;
    for (const t of S.tasks.values()) if (t.status !== "completed" && (first === null || t.col < first)) first = t.col;
    const pane = $("graph-pane");
    const x = first === null ? 0 : first * COL_W;
    if (x + CARD_W > pane.clientWidth) pane.scrollLeft = Math.max(0, x - COL_W / 2);
  }

  // the chain of the selected task: itself and every open blocker, transitively
  function chainOf(id) {
    const out = new Set(), stack = [id];
    while (stack.length) {
      const t = S.tasks.get(stack.pop());
      if (!t || out.has(t.id)) continue;
      out.add(t.id);
      if (t.status === "pending") for (const w of t.waiting) stack.push(w);
    }
    return out;
  }

  function select(id) {
    S.selected = id;
    S.chain = chainOf(id);
    renderGraph(null, null);
    showTab("task");
    loadDetails(id);
    const card = S.cards.get(id);
    if (card && !card.hidden) card.scrollIntoView({ block: "nearest", inline: "nearest" });
  }

  $("nodes").addEventListener("click", (e) => {
    const card = e.target.closest(".card");
    if (card) select(Number(card.dataset.id));
  });
  $("nodes").addEventListener("keydown", (e) => {
    const card = e.target.closest(".card");
    if (card && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); select(Number(card.dataset.id)); }
  });

  // ------------------------------------------------------------------ task details
  async function loadDetails(id) {
    let data;
    try {
      const r = await fetch(api("/api/task/" + id));
      data = await r.json();
      if (!r.ok) throw new Error(data.error || r.statusText);
    } catch (err) {
      $("details").replaceChildren(el("p", "said bad", "Could not load #" + id + ": " + err.message));
      return;
    }
    if (S.selected !== id) return;
    renderDetails(data);
  }

  function refList(refs) {
    if (!refs.length) return el("p", "hint", "none");
    const ul = el("ul", "refs");
    for (const r of refs) {
      const li = el("li");
      const a = el("a", "ref", "#" + r.id);
      a.tabIndex = 0;
      a.addEventListener("click", () => select(r.id));
      a.addEventListener("keydown", (e) => { if (e.key === "Enter") select(r.id); });
      li.append(a, document.createTextNode(" " + r.subject + " [" + r.status + "]"));
      ul.append(li);
    }
    return ul;
  }

  function renderDetails(d) {
    $("task-hint").hidden = true;
    const box = $("details");
    const parts = [el("h2", null, d.title), el("p", "state-word", d.state)];
    const dl = el("dl", "rows");
    for (const [k, v] of d.rows) dl.append(el("dt", null, k), el("dd", null, v));
    parts.push(dl);
    if (d.description) parts.push(el("h3", null, "Description"), el("pre", null, d.description));
    if (d.actions && (d.can_retry || d.can_cancel)) {
      const acts = el("div", "acts");
      const said = el("span", "said");
      said.setAttribute("role", "status");
      if (d.can_retry) acts.append(actionButton("Retry", "/api/task/" + d.id + "/retry", null, said));
      if (d.can_cancel) acts.append(actionButton("Cancel", "/api/task/" + d.id + "/cancel", null, said));
      acts.append(said);
      parts.push(acts);
    }
    const chain = el("pre", null, d.chain);
    chain.id = "chain";
    parts.push(el("h3", null, "Blocked chain (team task blocked " + d.id + ")"), chain);
    parts.push(el("h3", null, "Waits on"), refList(d.blocked_by), el("h3", null, "Blocks"), refList(d.blocks));
    if (d.log) {
      parts.push(el("h3", null, "Log" + (d.log.live ? " (running)" : "") + ": " + d.log.path), el("pre", "log", d.log.text));
    }
    if (d.transcript) {
      const tr = d.transcript;
      const tools = Object.entries(tr.tools).map(([n, c]) => n + " ×" + c).join(", ") || "no tool calls";
      parts.push(el("h3", null, "Transcript of " + tr.member), el("p", null, tr.messages + " messages · " + tools));
      if (tr.last) parts.push(el("pre", null, tr.last));
    }
    if (d.history.length) {
      const ol = el("ol", "feed");
      for (const a of d.history.slice().reverse()) ol.append(activityItem(a));
      parts.push(el("h3", null, "History"), ol);
    }
    box.replaceChildren(...parts);
  }

  async function post(path, body) {
    const r = await fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Board-Token": token },
      body: JSON.stringify(body || {}),
    });
    let data = {};
    try { data = await r.json(); } catch (err) { data = { error: r.statusText }; }
    if (!r.ok) throw new Error(data.error || r.statusText);
    return data.said;
  }

  function actionButton(label, path, body, said) {
    const b = el("button", null, label);
    b.type = "button";
    b.addEventListener("click", async () => {
      b.disabled = true;
      try { said.textContent = await post(path, body); said.className = "said"; }
      catch (err) { said.textContent = err.message; said.className = "said bad"; }
      finally { b.disabled = false; }
    });
    return b;
  }

  // ------------------------------------------------------------------ side tabs
  function showTab(name) {
    for (const b of document.querySelectorAll("#tabs button")) b.setAttribute("aria-selected", String(b.dataset.tab === name));
    for (const s of document.querySelectorAll(".tab")) s.hidden = s.id !== "tab-" + name;
  }
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => showTab(b.dataset.tab));

  function tabLabel(tab, name, count, what) {
    const b = document.querySelector('#tabs [data-tab="' + tab + '"]');
    b.textContent = name + (count ? " (" + count + ")" : "");
    b.title = count ? what : "";
  }

  function renderMembers() {
    const body = $("roster").tBodies[0];
    body.replaceChildren();
    for (const m of S.members) {
      const tr = el("tr");
      const task = el("td");
      if (m.task) {
        const a = el("a", "ref", "#" + m.task);
        a.addEventListener("click", () => select(m.task));
        task.append(a);
      }
      tr.append(el("td", null, m.name + " (" + m.role + ")"),
        el("td", "live-" + m.liveness, m.liveness + (m.reason && m.liveness === "dead" ? ": " + m.reason : "")),
        task, el("td", null, m.heartbeat_age === null ? "-" : dur(m.heartbeat_age) + " ago"),
        el("td", null, m.tokens.toLocaleString()), el("td", null, m.calls ? money(m.cost) : "-"));
      body.append(tr);
    }
    $("roster-empty").hidden = S.members.length > 0;
    const to = $("send-to"), keep = to.value;
    to.replaceChildren(el("option", null, "lead"), ...S.members.map((m) => el("option", null, m.name)));
    if ([...to.options].some((o) => o.value === keep)) to.value = keep;
    const working = S.members.filter((m) => m.liveness === "working").length;
    tabLabel("team", "Team", S.members.length ? working + "/" + S.members.length : "", working + " of " + S.members.length + " working");
  }

  $("send").addEventListener("submit", async (e) => {
    e.preventDefault();
    const said = $("send-said");
    try {
      said.textContent = await post("/api/send", { to: $("send-to").value, from: $("send-from").value, content: $("send-text").value });
      said.className = "said";
      $("send-text").value = "";
    } catch (err) { said.textContent = err.message; said.className = "said bad"; }
  });

  function renderJobs(jobs) {
    const body = $("jobs").tBodies[0];
    body.replaceChildren();
    for (const j of jobs.slice().reverse()) {
      const tr = el("tr");
      const task = el("td");
      if (j.task) {
        const a = el("a", "ref", "#" + j.task);
        a.addEventListener("click", () => select(j.task));
        task.append(a);
      }
      tr.append(el("td", "mono", j.id), el("td", null, j.status + (j.exit_code !== null ? " (exit " + j.exit_code + ")" : "")),
        task, el("td", null, j.owner), el("td", null, dur((j.finished || now()) - j.started)), el("td", "cmd", j.command));
      body.append(tr);
    }
    const running = jobs.filter((j) => j.status === "running").length;
    tabLabel("jobs", "Jobs", running ? String(running) : "", running + " running");
  }

  const FEED_MAX = 300;
  function prependAll(list, items, make) {
    const frag = document.createDocumentFragment();
    for (const it of items.slice().reverse()) frag.append(make(it));
    list.prepend(frag);
    while (list.children.length > FEED_MAX) list.lastChild.remove();
  }
  function addMessages(msgs) {
    prependAll($("messages"), msgs, (m) => {
      const li = el("li");
      li.append(el("span", "when", clock(m.ts)),
        document.createTextNode(m.sender + " → " + m.to + (m.type !== "message" ? " [" + m.type + "]" : "")),
        el("pre", null, m.content));
      return li;
    });
    const n = $("messages").children.length;
    tabLabel("inbox", "Inboxes", n ? String(n) : "", n + " recent messages");
  }
  function activityItem(a) {
    const li = el("li");
    const move = a.after ? " " + (a.before || "-") + " → " + a.after : "";
    li.append(el("span", "when", clock(a.ts)),
      document.createTextNode("#" + a.task + " " + a.event + move + (a.actor ? " by " + a.actor : "") + (a.note ? ": " + a.note : "")));
    return li;
  }
  function addActivity(acts) { prependAll($("activity"), acts, activityItem); }

  // running cards, elapsed time and ETA age by the second without any message
  setInterval(() => {
    for (const t of S.tasks.values()) {
      if (t.state !== "running") continue;
      const card = S.cards.get(t.id);
      if (card) card.lastChild.textContent = secondLine(t);
    }
  }, 1000);

  connect();
})();
