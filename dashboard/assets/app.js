// redmap dashboard: polls api/state once a second and draws it. No
// framework, no build step: the Go binary embeds this file as it is.
"use strict";

const $ = (id) => document.getElementById(id);
const expanded = new Set(); // failure groups whose stack is shown
const details = new Map(); // failure group → its whole record (api/failure), once asked for
let confirmPurge = { queue: "", until: 0 }; // a purge waits for a second click
let state = null;
let notice = { text: "", error: false, until: 0 }; // an action's outcome, shown for 15 s

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function num(n) {
  if (n >= 1e9) return (n / 1e9).toFixed(1) + "G";
  if (n >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (n >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return String(Math.round(n));
}

// rate shows elements a second with a sensible precision: 0.7/s is not 1/s.
function rate(n) {
  if (!n) return "0";
  if (n < 1) return n.toFixed(2);
  if (n < 10) return n.toFixed(1);
  return num(n);
}

function bytes(n) {
  if (n >= 1 << 30) return (n / (1 << 30)).toFixed(1) + " GiB";
  if (n >= 1 << 20) return (n / (1 << 20)).toFixed(1) + " MiB";
  if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
  return n + " B";
}

function dur(s) {
  if (!s || s <= 0) return "–";
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
  return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
}

// chart draws a queue's elements/s over the last 15 minutes as an SVG line.
function chart(series) {
  const w = 300, h = 70, max = Math.max(1, ...series);
  const pts = series.map((v, i) => `${((i / Math.max(1, series.length - 1)) * w).toFixed(1)},${(h - 2 - (v / max) * (h - 6)).toFixed(1)}`);
  return `<svg class="chart" viewBox="0 0 ${w} ${h}" preserveAspectRatio="none" role="img" aria-label="elements per second, last 15 minutes">
    <polygon class="area" points="0,${h} ${pts.join(" ")} ${w},${h}"></polygon>
    <polyline points="${pts.join(" ")}"></polyline></svg>
    <div class="chart-label"><span>15 min ago</span><span>peak ${num(max)}/s</span><span>now</span></div>`;
}

// limits lists the fleet-wide limits of queue's functions: each one's
// limit in force and its source, and the tasks waiting on it, holding its
// slots, the takes it refused, and the waits its RetryAfter answers made.
function limits(s, queue) {
  const ls = (s.limits || []).filter((l) => l.queue === queue);
  if (!ls.length) return "";
  return `<ul class="limits">${ls.map((l) => `<li data-func="${esc(l.func)}" title="${esc(l.source ? "set by " + (l.by || l.source) : "no record")}">
    <b>${esc(l.func)}</b> <span data-field="limit">${esc(l.limit)}</span> <i>${esc(l.source || "-")}</i>
    <span>waiting <b data-field="waiting">${num(l.waiting)}</b></span>
    <span>running <b data-field="running">${num(l.running)}</b></span>
    <span>throttled <b data-field="refused">${num(l.refused)}</b></span>
    <span title="waits its elements made because the function answered RetryAfter">retry-after <b data-field="retry_after">${num(l.retry_after)}</b></span></li>`).join("")}</ul>`;
}

// filter is the queue-name substring the operator typed (lower case): the
// page shows only those queues, and their batches, workers and failures.
let filter = "";
let idleOpen = false; // whether the operator unfolded the idle queues
$("filter").addEventListener("input", (ev) => { filter = ev.target.value.trim().toLowerCase(); render(); });
document.addEventListener("toggle", (ev) => {
  if (ev.target.classList && ev.target.classList.contains("idle")) idleOpen = ev.target.open;
}, true);

// view returns s with only what concerns the queues the filter matches.
function view(s) {
  if (!filter) return s;
  const match = (o) => (o.queue ?? o.name ?? o).toLowerCase().includes(filter);
  return Object.assign({}, s, {
    queues: s.queues.filter(match), idle: (s.idle || []).filter(match), batches: s.batches.filter(match), pipelines: (s.pipelines || []).filter(match),
    workers: s.workers.filter(match), failures: s.failures.filter(match), limits: (s.limits || []).filter(match),
  });
}

// renderIdle folds the idle queues (nothing queued, running or ended in
// 15 minutes) into one line that unfolds into their names.
function renderIdle(s) {
  // The fold as it is now: a click opens it at once, while its toggle
  // event comes later, after a render that would close it again.
  const shown = document.querySelector("details.idle");
  if (shown) idleOpen = shown.open;
  const idle = s.idle || [];
  const workers = s.idle_workers ? ` · their ${s.idle_workers} idle worker${s.idle_workers > 1 ? "s" : ""} not listed` : "";
  $("idle").innerHTML = idle.length ? `<details class="idle"${idleOpen ? " open" : ""}><summary>${idle.length} idle queue${idle.length > 1 ? "s" : ""}${workers}</summary>
    <div class="idle-names">${idle.map((q) => `<span data-idle="${esc(q)}">${esc(q)}</span>`).join("")}</div></details>` : "";
}

function renderQueues(s) {
  if (!s.queues.length) {
    const none = filter ? `No busy queue matches “${esc(filter)}”.` : (s.idle || []).length ? "No busy queue." : "No queue on this Redis yet.";
    $("queues").innerHTML = `<div class="empty">${none}</div>`;
    return;
  }
  $("queues").innerHTML = s.queues.map((q) => {
    let purge = "";
    if (s.actions) {
      const armed = confirmPurge.queue === q.name && Date.now() < confirmPurge.until;
      const toggle = q.paused ? "resume" : "pause";
      purge = `<button data-action="${toggle}" data-queue="${esc(q.name)}">${toggle}</button>` +
        `<button class="danger ${armed ? "confirm" : ""}" data-action="purge" data-queue="${esc(q.name)}">${armed ? "confirm purge" : "purge"}</button>`;
    }
    const paused = q.paused ? `<span class="paused" title="paused${q.paused.by ? " by " + esc(q.paused.by) : ""}${q.paused.since && !q.paused.since.startsWith("0001") ? " since " + esc(q.paused.since) : ""}: its workers take nothing until it is resumed">paused</span>` : "";
    return `<div class="card" data-queue="${esc(q.name)}">
      <h3><span>${esc(q.name)}</span>${paused}${purge}</h3>
      <div class="nums"><span>depth <b data-field="depth">${num(q.depth)}</b></span>
        <span>workers <b data-field="workers">${q.workers}</b></span>
        <span>batches <b data-field="batches">${q.batches}</b></span>
        <span title="elements ended a second over the last minute (since its first, for a queue younger than that)"><b data-field="rate">${rate(q.rate)}</b>/s over 1 min</span></div>
      ${q.series ? chart(q.series) : ""}${limits(s, q.name)}</div>`;
  }).join("");
}

// sizes sets the widths and offsets given as data-width and data-left (in
// percent) under el: through the CSSOM, which the page's Content-Security-
// Policy allows, not style attributes, which it refuses.
function sizes(el) {
  el.querySelectorAll("[data-width]").forEach((e) => { e.style.width = e.dataset.width + "%"; });
  el.querySelectorAll("[data-left]").forEach((e) => { e.style.left = e.dataset.left + "%"; });
}

// endedShown is how many ended batches show as cards; olderOpen, whether
// the operator unfolded the others.
const endedShown = 3;
let olderOpen = false;
document.addEventListener("toggle", (ev) => {
  if (ev.target.classList && ev.target.classList.contains("older")) olderOpen = ev.target.open;
}, true);

// pipelineCard shows a pipeline (manager.From) as one job: its stages, each
// with its done, failed and running elements and its throughput; a reduce
// stage's are its partitions, its keys that failed after the fold apart. Its
// cancel is its running batch's, which ends the whole pipeline.
function pipelineCard(s, p) {
  const running = !p.ended;
  const cancel = s.actions && running && p.batch ? `<button class="danger" data-action="cancel" data-queue="${esc(p.queue)}" data-manager="${esc(p.manager)}" data-batch="${esc(p.batch)}">cancel</button>` : "";
  const label = p.label ? ` · label <b>${esc(p.label)}</b>` : "";
  const rows = p.stages.map((g) => `<tr data-stage="${esc(g.stage)}" data-outcome="${esc(g.outcome)}"><td>${esc(g.stage)}</td><td>${esc(g.func)}</td><td><span class="badge ${esc(g.outcome.replace(" ", "-"))}">${esc(g.outcome)}</span></td>
    <td>${num(g.done)}</td><td>${num(g.failed)}</td><td>${num(g.running)}</td><td>${num(g.total)} <span class="muted">${esc(g.unit)}</span></td><td>${g.unit === "partitions" ? num(g.failed_keys || 0) : "-"}</td><td>${rate(g.rate)}/s</td><td>${num(g.batches)}</td></tr>`).join("");
  return `<div class="batch pipeline ${running ? "" : "finished"}" data-pipeline="${esc(p.name)}" data-outcome="${esc(p.outcome)}">
    <div class="head"><span><b>pipeline ${esc(p.name)}</b> <span class="muted">${esc(p.queue)}${p.durable ? " · durable" : ""}${label} · ${p.stages.length} stage${p.stages.length > 1 ? "s" : ""}${p.waiting ? ` · ${esc(p.waiting)}` : ""}</span></span>
      <span><span class="badge ${esc(p.outcome.replace(" ", "-"))}">${esc(p.outcome)}</span> ${cancel}</span></div>
    <div class="scroll"><table class="stages"><tr><th>stage</th><th>function</th><th>state</th><th>done</th><th>failed</th><th>running</th><th>of</th><th title="a reduce stage's keys that failed in the steps after its fold: its other counts are of partitions">keys failed</th><th>rate</th><th>batches</th></tr>${rows}</table></div></div>`;
}

function renderBatches(s) {
  // Running work first, pipelines and batches, then what ended: an old
  // pipeline's card never pushes a running batch out of view.
  const pipes = (s.pipelines || []).filter((p) => !p.ended).map((p) => pipelineCard(s, p)).join("");
  const endedPipes = (s.pipelines || []).filter((p) => p.ended).map((p) => pipelineCard(s, p)).join("");
  if (!s.batches.length) {
    $("batches").innerHTML = (pipes + endedPipes) || `<div class="empty">No batch running or ended lately.</div>`;
    return;
  }
  // Running batches, then the newest ended ones as cards; older ended ones
  // fold into one line, so that a busy queue's history (ended batches stay
  // for Options.Keep) does not push Workers and Failures off the screen.
  const card = (b) => {
    const ok = b.total ? (b.done / b.total) * 100 : 100; // done: with a value; failed apart
    const bad = b.total ? (b.failed / b.total) * 100 : 0;
    const running = !b.ended; // running, or a durable batch no manager holds (orphaned, done)
    const cancel = s.actions && running ? `<button class="danger" data-action="cancel" data-queue="${esc(b.queue)}" data-manager="${esc(b.manager)}" data-batch="${esc(b.id)}">cancel</button>` : "";
    // what the call says of its batch by name (codec.CallInfo): every field, as it comes
    const call = Object.entries(b.call || {}).map(([k, v]) => ` · ${esc(k)} <b>${esc(String(v))}</b>`).join("");
    const where = (b.worker ? ` · on worker ${esc(b.worker.slice(0, 8))}` : "") + (b.durable ? ` · durable <b>${esc(b.durable)}</b>` : "") + call;
    const ago = running ? "" : `<span>ended <b>${dur(Math.max(0.1, (Date.parse(s.time) - Date.parse(b.ended)) / 1000))}</b> ago</span>`;
    const causes = Object.entries(b.failed_by || {}).map(([k, n]) => `${esc(k)} ${num(n)}`).join(", ");
    return `<div class="batch ${running ? "" : "finished"}" data-batch="${esc(b.id)}" data-done="${b.done}" data-failed="${b.failed}" data-total="${b.total}" data-outcome="${esc(b.outcome)}">
      <div class="head"><span><b>${esc(b.func)}</b> <span class="muted">${esc(b.queue)} · priority ${b.priority}${where} · ${esc(b.id.slice(0, 8))}…${esc(b.id.slice(b.id.indexOf(":")))}</span></span>
        <span><span class="badge ${esc(b.outcome.replace(" ", "-"))}">${esc(b.outcome)}</span> ${cancel}</span></div>
      <div class="bar" title="${b.done} done, ${b.failed} failed, of ${b.total}"><div class="ok" data-width="${ok}"></div><div class="bad" data-left="${ok}" data-width="${bad}"></div></div>
      <div class="nums"><span><b>${num(b.done)}</b> done</span><span><b>${num(b.failed)}</b> failed${causes ? ` (${causes})` : ""}${!running && b.failed ? ` <a class="failed-list" href="api/failed?queue=${encodeURIComponent(b.queue)}&amp;batch=${encodeURIComponent(b.id)}" target="_blank" rel="noopener">list them</a>` : ""}</span><span>of <b>${num(b.total)}</b></span>${b.backups && b.backups.started ? `<span class="backups" title="copies of tasks held far longer than the batch's typical task: the first result wins">backups <b>${num(b.backups.started)}</b>: ${num(b.backups.won)} won, ${num(b.backups.wasted)} wasted</span>` : ""}
        <span><b>${rate(b.rate)}</b>/s</span>${b.outcome === "running" && !b.paused ? `<span>ETA <b>${dur(b.eta_seconds)}</b></span>` : running ? "" : ago}
        ${b.waiting ? `<span class="err">${esc(b.waiting)}</span>` : ""}${(b.alone || []).map(a => `<span class="err">${esc(a)}</span>`).join("")}${b.reason ? `<span class="muted">${esc(b.reason)}</span>` : ""}</div></div>`;
  };
  const ended = s.batches.filter((b) => b.ended);
  const older = ended.slice(endedShown);
  const folded = new Set(older);
  const left = s.ended_left ? `<div class="muted">${num(s.ended_left)} older ended batch${s.ended_left > 1 ? "es" : ""} not shown: <code>redmap batches -all</code> lists them</div>` : "";
  const shown = s.batches.filter((b) => !folded.has(b));
  $("batches").innerHTML = pipes + shown.filter((b) => !b.ended).map(card).join("") + endedPipes + shown.filter((b) => b.ended).map(card).join("") +
    (older.length ? `<details class="older"${olderOpen ? " open" : ""}><summary>${older.length} more ended batch${older.length > 1 ? "es" : ""}</summary>${older.map(card).join("")}${left}</details>` : left);
}

function renderWorkers(s) {
  const head = `<tr><th>queue</th><th>worker</th><th>state</th><th>host · pid · version</th><th>heartbeat</th><th>slots</th><th>held</th><th>taken</th><th>delivered</th><th>failed</th><th>functions</th><th>cache</th>${s.actions ? "<th></th>" : ""}</tr>`;
  if (!s.workers.length) {
    $("workers").innerHTML = head + `<tr><td colspan="13" class="empty">No worker.</td></tr>`;
    return;
  }
  $("workers").innerHTML = head + s.workers.map((w) => {
    const pct = w.concurrency ? Math.min(100, (w.running / w.concurrency) * 100) : 0;
    const drain = s.actions ? `<td>${w.live && w.state !== "draining" ? `<button data-action="drain" data-queue="${esc(w.queue)}" data-worker="${esc(w.id)}">drain</button>` : ""}</td>` : "";
    return `<tr class="${w.live ? "" : "dead"}" data-worker="${esc(w.id)}" data-state="${esc(w.state)}" title="${esc([w.alone, w.error].filter(Boolean).join("\n"))}">
      <td>${esc(w.queue)}</td><td>${esc(w.id.slice(0, 12))}</td><td><span class="badge ${esc(w.state)}">${esc(w.state)}</span>${w.slow ? ` <span class="badge late" title="backup tasks overtook ${w.overtaken} of its ${w.backup_races} tasks that got one">slow</span>` : ""}${w.live ? "" : ` <span class="muted">${dur(w.since_seconds)} ago</span>`}</td>
      <td class="wrap">${esc(w.host)} · ${w.pid}${w.version ? ` <span class="muted">${esc(w.version)}</span>` : ""}</td><td>${dur(w.heartbeat_age_seconds)}</td>
      <td><span class="slots"><span data-width="${pct}"></span></span>${w.running}/${w.concurrency}</td>
      <td>${num(w.held)}</td><td>${num(w.taken)}</td><td>${num(w.delivered)}</td><td>${num(w.failed)}</td>
      <td class="wrap">${esc(w.functions.join(", "))}</td><td title="constant cache: hits, bytes fetched">${num(w.cache_hits)} · ${bytes(w.cache_bytes)}</td>${drain}</tr>`;
  }).join("") + (s.gone_left ? `<tr><td colspan="13" class="muted">${num(s.gone_left)} more worker${s.gone_left > 1 ? "s" : ""} stopped or died lately, not shown: <code>redmap workers</code> lists them</td></tr>` : "");
}

function renderFailures(s) {
  const head = `<tr><th>queue</th><th>function</th><th>kind</th><th>group</th><th>count</th><th>first seen</th><th>last seen</th><th>seen by</th></tr>`;
  if (!s.failures.length) {
    $("failures").innerHTML = head + `<tr><td colspan="8" class="empty">No failure recorded.</td></tr>`;
    return;
  }
  $("failures").innerHTML = head + s.failures.map((f) => {
    const key = JSON.stringify([f.queue, f.func, f.kind, f.group]);
    const open = expanded.has(key);
    const ago = (t) => dur((new Date(s.time) - new Date(t)) / 1000) + " ago";
    let row = `<tr class="fail" data-key="${esc(key)}" data-count="${f.count}" title="click for its last message and a stack"><td>${esc(f.queue)}</td><td>${esc(f.func)}</td><td>${esc(f.kind)}</td>
      <td class="err">${esc(f.group)}</td><td>${num(f.count)}</td><td>${ago(f.first)}</td><td>${ago(f.last)}</td><td title="${esc((f.workers || []).join(", "))}">${(f.workers || []).length}</td></tr>`;
    if (open) {
      const d = details.get(key);
      row += `<tr class="stack"><td colspan="8">${!d ? `<span class="muted">loading…</span>` : d.failed ? `<span class="err">${esc(d.failed)}</span>` :
        `<pre class="stack">last: ${esc(d.error)} (task ${esc(d.sample_task)}; workers ${esc((d.workers || []).join(", "))})\n\n${esc(d.sample_stack || "(no stack recorded)")}</pre>`}</td></tr>`;
    }
    return row;
  }).join("") + (s.failures_left ? `<tr><td colspan="8" class="muted">${num(s.failures_left)} more failure group${s.failures_left > 1 ? "s" : ""}, seen less lately: redmap failures lists them all</td></tr>` : "");
}

function render() {
  if (!state) return;
  const v = view(state);
  renderQueues(v);
  renderIdle(v);
  renderBatches(v);
  renderWorkers(v);
  renderFailures(v);
  sizes(document.body);
}

// The operator token, entered once per tab: kept in the tab's session
// storage (never a cookie, which other sites' forms could ride, nor a URL),
// sent in the X-Redmap-Token header.
let token = sessionStorage.getItem("redmap-token") || "";

function headers(extra) {
  const h = Object.assign({}, extra);
  if (token) h["X-Redmap-Token"] = token; // its own header: a proxy's login keeps Authorization
  return h;
}

// askToken shows the sign-in form, saying why.
function askToken(why) {
  $("login-why").textContent = why;
  $("login").hidden = false;
  $("token").focus();
}

async function poll() {
  try {
    const r = await fetch("api/state", { cache: "no-store", headers: headers() });
    if (r.status === 401 || r.status === 403) {
      askToken((await r.text()).trim());
      throw new Error("the operator token is needed to read this dashboard");
    }
    if (!r.ok) throw new Error((await r.text()).trim() || r.statusText);
    state = await r.json();
    const shown = Date.now() < notice.until;
    $("status").textContent = "updated " + new Date().toLocaleTimeString() + (state.actions ? " · actions on" + (token ? " · signed in" : "") : " · read-only") +
      (shown ? " · " + notice.text : "");
    $("status").classList.toggle("error", shown && notice.error);
    render();
  } catch (e) {
    $("status").textContent = "cannot read the state: " + e.message;
    $("status").classList.add("error");
  }
}

// detail fetches failure group key's whole record (its stack, its last
// message in full): the state carries neither, to stay small.
async function detail(key) {
  const [queue, func, kind, group] = JSON.parse(key);
  try {
    const r = await fetch("api/failure?" + new URLSearchParams({ queue, func, kind, group }), { cache: "no-store", headers: headers() });
    details.set(key, r.ok ? await r.json() : { failed: (await r.text()).trim() });
  } catch (e) {
    details.set(key, { failed: "cannot read the failure: " + e.message });
  }
  render();
}

let retry = null; // the action to send again once signed in

async function act(path, body) {
  try {
    const r = await fetch(path, { method: "POST", headers: headers({ "Content-Type": "application/json", "X-Redmap-Action": "1" }), body: JSON.stringify(body) });
    const text = await r.text();
    if (r.status === 401 || (r.status === 403 && token && text.includes("token"))) {
      retry = () => act(path, body);
      askToken(text.trim());
      return;
    }
    notice = { text: r.ok ? JSON.parse(text).result : text.trim(), error: !r.ok, until: Date.now() + 15000 };
  } catch (e) {
    notice = { text: "action failed: " + e.message, error: true, until: Date.now() + 15000 };
  }
  poll();
}

$("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("token").value;
  sessionStorage.setItem("redmap-token", token);
  $("token").value = "";
  $("login").hidden = true;
  const again = retry;
  retry = null;
  if (again) again(); else poll();
});

document.addEventListener("click", (ev) => {
  const btn = ev.target.closest("button[data-action]");
  if (btn) {
    const d = btn.dataset;
    if (d.action === "drain") act("api/drain", { queue: d.queue, worker: d.worker });
    if (d.action === "cancel") act("api/cancel", { queue: d.queue, manager: d.manager, batch: d.batch });
    if (d.action === "pause") act("api/pause", { queue: d.queue });
    if (d.action === "resume") act("api/resume", { queue: d.queue });
    if (d.action === "purge") {
      if (confirmPurge.queue === d.queue && Date.now() < confirmPurge.until) {
        confirmPurge = { queue: "", until: 0 };
        act("api/purge", { queue: d.queue, confirm: d.queue });
      } else {
        confirmPurge = { queue: d.queue, until: Date.now() + 5000 };
        render();
      }
    }
    return;
  }
  const row = ev.target.closest("tr.fail");
  if (row) {
    const k = row.dataset.key;
    if (expanded.has(k)) { expanded.delete(k); details.delete(k); } else { expanded.add(k); detail(k); }
    render();
  }
});

poll();
setInterval(poll, 1000);
