// scadad status page. Plain JavaScript, no build step, no library: the
// page is embedded in the scadad binary and plants are air-gapped. It
// polls the node's /ui/api/ every second and, when that node stops
// answering, moves to a peer's page it learnt of.
"use strict";

const state = { view: null, role: "viewer", failures: 0, pages: {}, moving: false, parkedOpen: {} };
const palette = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f", "#5d4037"];

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function $(sel) { return document.querySelector(sel); }
function ago(ms) {
  if (ms < 0) return "unknown";
  const s = ms / 1000;
  if (s < 1) return ms + " ms";
  if (s < 120) return s.toFixed(1) + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  if (s < 172800) return Math.round(s / 3600) + " h";
  return Math.round(s / 86400) + " days";
}
function clock(ms) { return new Date(ms).toLocaleTimeString([], { hour12: false }); }

async function api(path, opts) {
  const r = await fetch(path, Object.assign({ cache: "no-store" }, opts || {}));
  const ct = r.headers.get("Content-Type") || "";
  const body = ct.startsWith("application/json") ? await r.json() : await r.text();
  if (!r.ok) throw new Error((body && body.error) || r.status + " " + r.statusText);
  return body;
}

// ---- polling and reconnecting ----

async function pollSite() {
  try {
    const v = await api("/ui/api/site");
    state.failures = 0;
    state.view = v;
    state.role = v.role;
    for (const n of v.nodes) if (n.page_url) state.pages[n.id] = n.page_url;
    try { sessionStorage.setItem("scadad-pages", JSON.stringify(state.pages)); } catch (e) { /* private mode */ }
    renderSite(v);
    setConn(true, "live from " + v.served_by);
  } catch (e) {
    state.failures++;
    setConn(false, "lost contact with this node (" + e.message + ")");
    if (state.failures >= 2) moveToPeer();
  }
}

function setConn(ok, text) {
  const el = $("#conn");
  el.textContent = text;
  el.classList.toggle("lost", !ok);
}

// moveToPeer loads the page of the first other node that answers.
async function moveToPeer() {
  if (state.moving) return;
  state.moving = true;
  const here = location.origin;
  for (const [id, url] of Object.entries(state.pages)) {
    if (url === here) continue;
    try {
      await fetch(url + "/ui/api/site", { mode: "no-cors", cache: "no-store" });
      setConn(false, "moving to " + id + " at " + url);
      location.href = url + "/";
      return;
    } catch (e) { /* try the next one */ }
  }
  state.moving = false;
}

// ---- nodes ----

function renderSite(v) {
  $("#whoami").textContent = "you: " + v.role + (v.role === "viewer" ? " (read only)" : "");
  const now = v.at;
  const rows = v.nodes.map(n => {
    const role = n.reachable ? n.role : "unreachable";
    const reach = n.self ? '<span class="ok">this node</span>' :
      (n.reachable ? '<span class="ok">yes</span>' : '<span class="bad">NO</span>') +
      (n.reachable_since ? ' <span class="muted">since ' + clock(n.reachable_since) + " (" + ago(now - n.reachable_since) + ")</span>" : "") +
      (n.error ? ' <span class="muted err" title="' + esc(n.error) + '">' + esc(shortError(n.error)) + "</span>" : "");
    const cert = n.cert_not_after ? certText(n.cert_not_after, now) : "";
    return '<tr data-node="' + esc(n.id) + '" class="' + (n.reachable ? "" : "down") + '">' +
      "<td>" + esc(n.id) + (n.witness ? ' <span class="muted">witness</span>' : "") + "</td>" +
      '<td class="role"><span class="role-' + esc(role) + '">' + esc(role) + "</span></td>" +
      '<td class="sl">' + (n.reachable ? n.service_level : "") + "</td>" +
      '<td class="reach">' + reach + "</td>" +
      "<td>" + (n.self ? "" : ago(n.last_contact_ms)) + "</td>" +
      "<td>" + (n.reachable ? n.term : "") + "</td>" +
      "<td>" + (n.reachable ? n.commit + " / " + n.applied : "") + "</td>" +
      '<td class="' + (n.behind > 1000 ? "warn" : "") + '">' + (n.reachable ? n.behind : "") + "</td>" +
      "<td>" + (n.reachable ? n.cluster_epoch + "." + n.term : "") + "</td>" +
      '<td title="' + esc((n.build_revision ? "commit " + n.build_revision : "") + (n.feature_level ? ", feature level " + n.feature_level : "")) + '">' + esc(n.version) +
        (n.build_revision ? ' <span class="muted">' + esc(n.build_revision.slice(0, 8)) + "</span>" : "") + "</td>" +
      "<td>" + cert + "</td>" +
      "<td>" + (n.reachable ? n.deploy_revision : "") + "</td></tr>";
  });
  $("#nodes tbody").innerHTML = rows.join("");
  const actives = v.nodes.filter(n => n.reachable && n.role === "active").map(n => n.id);
  $("#site-roles").innerHTML = actives.length === 1 ? '<span class="muted">Active: ' + esc(actives[0]) + "</span>" :
    '<span class="bad">' + (actives.length ? actives.length + " Active nodes: " + esc(actives.join(", ")) : "no Active node") + "</span>";
  renderTargets(v);
  renderConnections(v);
}

// shortError is the gist of a control API error: its code, and "refused"
// or "timed out" when the text says so (the whole text is the tooltip).
function shortError(e) {
  const code = e.split(":")[0];
  if (/connection refused/.test(e)) return code + ": connection refused";
  if (/deadline|timeout/i.test(e)) return code + ": timed out";
  return e.length > 60 ? e.slice(0, 57) + "…" : e;
}

function certText(unix, nowMs) {
  const left = unix * 1000 - nowMs;
  const d = Math.floor(left / 86400000);
  const when = new Date(unix * 1000).toISOString().slice(0, 10);
  if (left <= 0) return '<span class="bad">EXPIRED ' + when + "</span>";
  if (d < 30) return '<span class="bad">' + when + " (" + d + " days)</span>";
  return when + ' <span class="muted">(' + d + " days)</span>";
}

// ---- store-and-forward ----

function renderTargets(v) {
  $("#sf-from").textContent = v.sf_error ? "(" + v.sf_error + ")" :
    v.sf_from ? "(figures of " + v.sf_from + (v.sf_live ? ", the Active" : ", a replica: no Active to ask") + ")" : "";
  $("#targets tbody").innerHTML = (v.targets || []).map(t => {
    const cap = t.max_pending ? " / " + t.max_pending : "";
    const frac = t.max_pending ? Math.min(1, t.pending / t.max_pending) : 0;
    const bar = t.max_pending ? '<span class="bar' + (frac >= 1 ? " full" : "") + '"><span style="width:' + (frac * 100).toFixed(0) + '%"></span></span>' : "";
    const parked = t.parked ? '<button class="show-parked" data-target="' + esc(t.target) + '">' + t.parked + " parked…</button>" : "0";
    return '<tr data-target="' + esc(t.target) + '"><td>' + esc(t.target) + "</td>" +
      '<td class="pending">' + bar + t.pending + cap + "</td>" +
      "<td>" + (t.oldest_age_s ? ago(t.oldest_age_s * 1000) : "") + "</td>" +
      "<td>" + t.enqueued_per_sec.toFixed(1) + "</td>" +
      "<td>" + t.delivered_per_sec.toFixed(1) + "</td>" +
      '<td class="parked">' + parked + "</td>" +
      '<td class="' + (t.last_error ? "bad" : "") + '">' + esc(t.last_error) + "</td></tr>";
  }).join("");
  for (const b of document.querySelectorAll("button.show-parked")) {
    b.onclick = () => { state.parkedOpen[b.dataset.target] = true; loadParked(b.dataset.target); };
  }
}

async function loadParked(target) {
  const box = $("#parked");
  try {
    const r = await api("/ui/api/sf/parked?target=" + encodeURIComponent(target));
    const act = state.role === "operator";
    const msgs = r.messages || [];
    box.innerHTML = "<h3>Parked for " + esc(target) + " (" + msgs.length + ")" +
      (act && msgs.length ? ' <button class="retry-all" data-target="' + esc(target) + '">retry all</button>' : "") + "</h3>" +
      '<table class="parked-list"><thead><tr><th>id</th><th>enqueued</th><th>attempts</th><th>reason</th><th></th></tr></thead><tbody>' +
      msgs.map(m => '<tr data-id="' + esc(m.id) + '"><td>' + esc(m.id) + "</td><td>" + clock(m.enqueued_unix_nano / 1e6) + "</td><td>" + (m.attempts || 0) +
        "</td><td>" + esc(m.park_reason) + "</td><td>" +
        (act ? '<button class="retry" data-id="' + esc(m.id) + '">retry</button> <button class="discard danger" data-id="' + esc(m.id) + '">discard</button>' : "") +
        "</td></tr>").join("") + "</tbody></table>";
    for (const b of box.querySelectorAll("button.retry")) b.onclick = () => action("retry", { ids: [b.dataset.id] }, "Retry message " + b.dataset.id + "? It goes back to pending and is delivered again.", target);
    for (const b of box.querySelectorAll("button.discard")) b.onclick = () => action("discard", { ids: [b.dataset.id] }, "Discard message " + b.dataset.id + "? It is dropped for good and never delivered.", target);
    for (const b of box.querySelectorAll("button.retry-all")) b.onclick = () => action("retry", { target: target }, "Retry all parked messages for " + target + "?", target);
  } catch (e) {
    box.textContent = "parked messages: " + e.message;
  }
}

function confirmBox(text) {
  return new Promise(resolve => {
    $("#confirm-text").textContent = text;
    $("#confirm").hidden = false;
    const done = ok => { $("#confirm").hidden = true; resolve(ok); };
    $("#confirm-yes").onclick = () => done(true);
    $("#confirm-no").onclick = () => done(false);
  });
}

async function action(what, body, question, target) {
  if (!await confirmBox(question)) return;
  try {
    const r = await api("/ui/api/sf/" + what, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    setConn(true, what + ": " + r.affected + " message(s)");
  } catch (e) {
    alertText(what + " failed: " + e.message);
  }
  loadParked(target);
}

function alertText(t) { $("#parked").insertAdjacentHTML("afterbegin", '<p class="bad action-error">' + esc(t) + "</p>"); }

// ---- field connections ----

function renderConnections(v) {
  const rows = [];
  for (const n of v.nodes) {
    for (const c of n.connections || []) {
      rows.push("<tr><td>" + esc(n.id) + "</td><td>" + esc(c.name) + "</td><td>" + esc(c.kind) + "</td><td>" + esc(c.endpoint) + "</td><td>" +
        (c.up ? '<span class="ok">up</span>' : '<span class="bad">down</span>') + "</td><td>" + esc(c.detail) + "</td></tr>");
    }
  }
  $("#connections tbody").innerHTML = rows.length ? rows.join("") : '<tr><td colspan="6" class="muted">no field connections run on any node</td></tr>';
}

// ---- deploy ----

async function pollDeploy() {
  try {
    const d = await api("/ui/api/deploy");
    const st = d.status || {}, h = d.history || {};
    $("#deploy-nodes tbody").innerHTML = (st.nodes || []).map(n => "<tr><td>" + esc(n.node_id) + "</td><td>" + (n.revision || 0) + "</td><td>" +
      (n.ok ? '<span class="ok">applied</span>' : '<span class="bad">failed</span>') + "</td><td>" + esc(n.reason) + "</td></tr>").join("");
    const revs = (h.revisions || []).slice().reverse();
    $("#deploy-history tbody").innerHTML = revs.map(r => "<tr><td>" + r.revision + (r.revision === h.current ? " (current)" : "") + "</td><td>" +
      new Date(r.time_unix_nano / 1e6).toLocaleString() + "</td><td>" + esc(r.actor) + "</td><td>" + esc(r.message) +
      (r.rollback_of ? " (rollback to " + r.rollback_of + ")" : "") + "</td><td>" +
      (r.revision > 1 ? '<button class="diff-btn" data-rev="' + r.revision + '">diff</button>' : "") + "</td></tr>").join("");
    for (const b of document.querySelectorAll("button.diff-btn")) b.onclick = () => showDiff(+b.dataset.rev);
  } catch (e) {
    $("#deploy-nodes tbody").innerHTML = '<tr><td colspan="4" class="muted">' + esc(e.message) + "</td></tr>";
  }
}

async function showDiff(rev) {
  const el = $("#diff");
  try {
    const [a, b] = await Promise.all([api("/ui/api/deploy/artifact?revision=" + (rev - 1)), api("/ui/api/deploy/artifact?revision=" + rev)]);
    el.innerHTML = "<b>revision " + (rev - 1) + " → " + rev + "</b>\n" + lineDiff(String(a).split("\n"), String(b).split("\n"));
  } catch (e) {
    el.textContent = "diff: " + e.message;
  }
  el.hidden = false;
}

// lineDiff is a longest-common-subsequence diff of two line lists (site
// configs are small; beyond 3000 lines it shows both whole).
function lineDiff(a, b) {
  if (a.length * b.length > 9e6) return '<span class="del">' + esc(a.join("\n")) + '</span>\n<span class="add">' + esc(b.join("\n")) + "</span>";
  const m = a.length, n = b.length;
  const L = Array.from({ length: m + 1 }, () => new Uint16Array(n + 1));
  for (let i = m - 1; i >= 0; i--) for (let j = n - 1; j >= 0; j--) L[i][j] = a[i] === b[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < m || j < n) {
    if (i < m && j < n && a[i] === b[j]) { out.push("  " + esc(a[i])); i++; j++; }
    // A change reads as the old line, then the new one.
    else if (i < m && (j >= n || L[i + 1][j] >= L[i][j + 1])) { out.push('<span class="del">- ' + esc(a[i]) + "</span>"); i++; }
    else { out.push('<span class="add">+ ' + esc(b[j]) + "</span>"); j++; }
  }
  return out.join("\n");
}

// ---- timeline ----

const kindColor = k => k === "leader.elected" ? "#1565c0" : k === "failover" ? "#2e7d32" : k === "override" ? "#c62828" :
  k.startsWith("heal.") ? "#6a1b9a" : k === "deploy" ? "#ef6c00" : k.startsWith("alarm.") ? "#d81b60" : "#607d8b";

const roleColor = r => r === "active" ? "#1565c0" : r === "standby" ? "#66bb6a" : r === "detached" ? "#ffa726" :
  r === "witness" ? "#90a4ae" : r === "unreachable" ? "#c62828" : "#bdbdbd";

async function pollTimeline() {
  try {
    const t = await api("/ui/api/timeline?hours=" + $("#timeline-hours").value);
    renderTimeline(t);
  } catch (e) {
    $("#timeline").textContent = "timeline: " + e.message;
  }
}

function renderTimeline(t) {
  const v = state.view;
  const nodes = v ? v.nodes.map(n => n.id) : [];
  for (const s of t.active) if (!nodes.includes(s.node)) nodes.push(s.node);
  const W = 1000, left = 90, rowH = 22, top = 6, evH = 26, H = top + nodes.length * rowH + evH + 22;
  // The chart starts at the window's start or, on a younger site, a little
  // before its first entry (at least 5 minutes shown).
  let first = t.to;
  for (const s of t.active) first = Math.min(first, s.from);
  for (const e of t.events) first = Math.min(first, e.at);
  const from = Math.max(t.from, Math.min(t.to - 300000, first - (t.to - first) * 0.05));
  t = Object.assign({}, t, { from: from });
  const x = ms => left + (W - left - 10) * (Math.max(ms, from) - from) / Math.max(1, t.to - from);
  const row = id => top + nodes.indexOf(id) * rowH;
  let svg = '<svg viewBox="0 0 ' + W + " " + H + '" width="100%" role="img" aria-label="timeline">';
  nodes.forEach((id, i) => {
    svg += '<text x="4" y="' + (row(id) + 15) + '">' + esc(id) + "</text>";
    svg += '<rect x="' + left + '" y="' + (row(id) + 3) + '" width="' + (W - left - 10) + '" height="' + (rowH - 6) + '" fill="#eceff1"/>';
  });
  // What this node's console saw of each node's role, under the
  // replicated Active spans (which also cover the time before it started).
  for (const s of t.roles || []) {
    if (!nodes.includes(s.node)) continue;
    svg += '<rect class="role" data-node="' + esc(s.node) + '" data-role="' + esc(s.role) + '" x="' + x(s.from) + '" y="' + (row(s.node) + 3) + '" width="' +
      Math.max(1, x(s.to) - x(s.from)) + '" height="' + (rowH - 6) + '" fill="' + roleColor(s.role) + '"><title>' + esc(s.node) + " " + esc(s.role) + " " +
      clock(s.from) + "–" + (s.open ? "now" : clock(s.to)) + "</title></rect>";
  }
  for (const s of t.active) {
    svg += '<rect class="active" data-node="' + esc(s.node) + '" x="' + x(s.from) + '" y="' + (row(s.node) + 3) + '" width="' + Math.max(1, x(s.to) - x(s.from)) +
      '" height="' + (rowH - 6) + '" fill="#1565c0"><title>' + esc(s.node) + " Active " + clock(s.from) + "–" + (s.open ? "now" : clock(s.to)) + "</title></rect>";
  }
  if (v) for (const n of v.nodes) {
    if (!n.reachable && n.reachable_since) {
      svg += '<rect class="unreachable" data-node="' + esc(n.id) + '" x="' + x(Math.max(t.from, n.reachable_since)) + '" y="' + (row(n.id) + 3) + '" width="' +
        Math.max(2, x(t.to) - x(Math.max(t.from, n.reachable_since))) + '" height="' + (rowH - 6) + '" fill="#c62828" opacity="0.7"><title>' + esc(n.id) +
        " unreachable since " + clock(n.reachable_since) + "</title></rect>";
    }
  }
  // Events: a tick each on the event row, never a text label (many events
  // in a short time would overlap): the title shows on hover, and the
  // list below names the newest.
  const evY = top + nodes.length * rowH + 4;
  svg += '<text x="4" y="' + (evY + 15) + '">events</text>';
  for (const e of t.events) {
    const c = kindColor(e.kind);
    const onRow = e.kind === "leader.elected" && nodes.includes(e.actor);
    const y = onRow ? row(e.actor) : evY;
    svg += '<g class="event" data-kind="' + esc(e.kind) + '" data-actor="' + esc(e.actor) + '"><line x1="' + x(e.at) + '" x2="' + x(e.at) + '" y1="' + y + '" y2="' + (y + rowH) +
      '" stroke="' + c + '" stroke-width="3"/><title>' + esc(clock(e.at) + " " + e.kind + " (" + e.actor + "): " + e.detail) + "</title></g>";
  }
  const ticks = 6;
  for (let i = 0; i <= ticks; i++) {
    const ms = t.from + (t.to - t.from) * i / ticks;
    svg += '<text x="' + x(ms) + '" y="' + (H - 4) + '" text-anchor="' + (i === 0 ? "start" : i === ticks ? "end" : "middle") + '">' + clock(ms) + "</text>";
  }
  svg += "</svg>";
  $("#timeline").innerHTML = svg;
  const recent = t.events.slice(-8).reverse();
  $("#timeline-legend").innerHTML = ["active", "standby", "detached", "witness", "unreachable"].map(r => '<span style="color:' + roleColor(r) + '">■ ' + r + "</span>").join("") +
    "<ul class=\"recent\">" + recent.map(e => '<li data-kind="' + esc(e.kind) + '"><span style="color:' + kindColor(e.kind) + '">●</span> ' + clock(e.at) + " <b>" + esc(e.kind) + "</b> " +
      esc(e.actor) + ": " + esc(e.detail) + "</li>").join("") + "</ul>";
}

// ---- live charts ----

async function pollHistory() {
  try {
    const h = await api("/ui/api/history");
    const s = h.samples || [];
    const sl = {}, pending = {}, rate = {}, enq = {};
    for (const p of s) {
      for (const [n, v] of Object.entries(p.service_level || {})) (sl[n] = sl[n] || []).push([p.at, v]);
      for (const [t, v] of Object.entries(p.pending || {})) (pending[t] = pending[t] || []).push([p.at, v]);
      for (const [t, v] of Object.entries(p.enqueued_per_sec || {})) (enq[t] = enq[t] || []).push([p.at, v]);
    }
    for (let i = 1; i < s.length; i++) {
      const dt = (s[i].at - s[i - 1].at) / 1000;
      for (const [t, v] of Object.entries(s[i].delivered_total || {})) {
        const before = (s[i - 1].delivered_total || {})[t];
        if (before !== undefined && dt > 0 && v >= before) (rate[t] = rate[t] || []).push([s[i].at, (v - before) / dt]);
      }
    }
    lineChart($("#chart-sl"), sl, 0, 255);
    lineChart($("#chart-pending"), pending, 0);
    lineChart($("#chart-rate"), rate, 0);
    lineChart($("#chart-enqueue"), enq, 0);
  } catch (e) { /* the site poll reports lost contact */ }
}

function lineChart(el, series, yMin, yMax) {
  const W = 320, H = 140, l = 40, r = 6, t = 6, b = 18;
  const names = Object.keys(series).sort();
  let tMin = Infinity, tMax = -Infinity, vMax = yMax ?? 0;
  for (const n of names) for (const [tt, v] of series[n]) { tMin = Math.min(tMin, tt); tMax = Math.max(tMax, tt); if (yMax === undefined) vMax = Math.max(vMax, v); }
  if (!names.length || tMin === tMax) { el.innerHTML = '<p class="muted">no data yet</p>'; return; }
  if (vMax <= yMin) vMax = yMin + 1;
  const x = tt => l + (W - l - r) * (tt - tMin) / (tMax - tMin);
  const y = v => t + (H - t - b) * (1 - (v - yMin) / (vMax - yMin));
  let svg = '<svg viewBox="0 0 ' + W + " " + H + '" width="100%">';
  svg += '<line x1="' + l + '" x2="' + (W - r) + '" y1="' + y(yMin) + '" y2="' + y(yMin) + '" stroke="#b0bec5"/>';
  svg += '<text x="' + (l - 4) + '" y="' + (y(vMax) + 8) + '" text-anchor="end">' + fmt(vMax) + '</text><text x="' + (l - 4) + '" y="' + y(yMin) + '" text-anchor="end">' + fmt(yMin) + "</text>";
  svg += '<text x="' + l + '" y="' + (H - 4) + '">' + clock(tMin) + '</text><text x="' + (W - r) + '" y="' + (H - 4) + '" text-anchor="end">' + clock(tMax) + "</text>";
  names.forEach((n, i) => {
    const pts = series[n].map(([tt, v]) => x(tt).toFixed(1) + "," + y(v).toFixed(1)).join(" ");
    svg += '<polyline fill="none" stroke="' + palette[i % palette.length] + '" stroke-width="1.5" points="' + pts + '"><title>' + esc(n) + "</title></polyline>";
  });
  svg += "</svg>";
  el.innerHTML = svg + '<div class="legend">' + names.map((n, i) => '<span style="color:' + palette[i % palette.length] + '">■ ' + esc(n) + "</span>").join("") + "</div>";
}
function fmt(v) { return v >= 1000 ? (v / 1000).toFixed(1) + "k" : String(Math.round(v * 10) / 10); }

// ---- start ----

try { Object.assign(state.pages, JSON.parse(sessionStorage.getItem("scadad-pages") || "{}")); } catch (e) { /* none yet */ }
$("#timeline-hours").onchange = pollTimeline;
pollSite();
pollHistory();
pollTimeline();
pollDeploy();
setInterval(pollSite, 1000);
setInterval(pollHistory, 2000);
setInterval(pollTimeline, 2000);
setInterval(pollDeploy, 10000);
