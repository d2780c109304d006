// The Harvester page and the Harvest progress tab: poll the JSON API and redraw, never reload.
// Requests carry the Airflow UI's session cookie (same origin), which the API checks.
"use strict";

const API = new URL("../api/", window.location.href);
const REFRESH_MS = 3000;
const SLOT_STATES = ["NO_PAGE", "PREPARING_PAGE", "PAGE_READY", "RUNNING_SCRAPING_TASK", "CLOSING_PAGE"];
const STATE_COLOURS = ["#a0aec0", "#ecc94b", "#48bb78", "#3182ce", "#e53e3e"];

async function api(path, options = {}) {
  // the page's own header: the API refuses changes that carry the session cookie alone (a cross-site form)
  const headers = { "X-Harvester-Request": "1", ...(options.headers || {}) };
  const response = await fetch(new URL(path, API), { credentials: "same-origin", ...options, headers });
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new Error(`${response.status} ${typeof detail === "string" ? detail : JSON.stringify(detail)}`);
  }
  return response.json();
}

function cell(text, className) {
  const td = document.createElement("td");
  if (text instanceof Node) td.appendChild(text); else td.textContent = text === null || text === undefined ? "" : String(text);
  if (className) td.className = className;
  return td;
}

function row(cells, attributes = {}) {
  const tr = document.createElement("tr");
  for (const [name, value] of Object.entries(attributes)) tr.setAttribute(name, value);
  for (const c of cells) tr.appendChild(c);
  return tr;
}

function flag(text) {
  const span = document.createElement("span");
  span.className = "flag";
  span.textContent = text;
  return span;
}

function fill(tbody, rows, empty) {
  tbody.replaceChildren(...rows);
  if (!rows.length && empty) {
    const td = cell(empty, "muted");
    td.colSpan = tbody.closest("table").querySelectorAll("th").length;
    tbody.appendChild(row([td]));
  }
}

// A run's outcome from its data: a coloured word, and the reason beside it.
function outcomeBadge(outcome, words) {
  const span = document.createElement("span");
  span.className = `outcome outcome-${outcome}`;
  span.textContent = words || outcome;
  return span;
}

function progressText(p) {
  if (!p) return "";
  const rate = p.pages_per_minute === null || p.pages_per_minute === undefined ? "" : `, ${p.pages_per_minute} pages/min`;
  const eta = p.eta ? `, ETA ${p.eta}` : "";
  const hosts = p.hosts ? `; ${hostsText(p.hosts)}` : "";
  return `${p.packages_finished} / ${p.packages_total} packages, ${p.tasks_done} pages stored, ${p.tasks_pending} pending${rate}${eta}${hosts}`;
}

// A run over several site hosts: counts, then its slowest hosts by mean fetch time (never a list of every host).
function hostsText(h) {
  if (!h) return "";
  const states = [["waiting", h.waiting], ["in flight", h.in_flight], ["paused", h.paused],
    ["unreachable", h.unreachable], ["slowed", h.slowed]].filter(([, n]) => n).map(([word, n]) => `${n} ${word}`);
  return `hosts ${h.done} / ${h.hosts} done` + (states.length ? ` (${states.join(", ")})` : "");
}

function slowestText(h) {
  if (!h || !h.slowest.length) return "";
  return h.slowest.map((e) => `${e.host} ${e.mean_seconds}s (${e.pages} pages${e.unreachable ? `, ${e.unreachable} unreachable` : ""})`).join(", ");
}

function link(text, onClick) {
  const a = document.createElement("a");
  a.href = "#";
  a.textContent = text;
  a.addEventListener("click", (event) => { event.preventDefault(); onClick(); });
  return a;
}

function percent(share) { return share === null || share === undefined ? "—" : `${(share * 100).toFixed(1)}%`; }

function reasons(byReason) {
  const entries = Object.entries(byReason || {}).sort((a, b) => b[1] - a[1]);
  return entries.map(([reason, count]) => `${reason} ${count}`).join(", ");
}

function setStatus(error) {
  document.getElementById("refreshed").textContent = `updated ${new Date().toLocaleTimeString()}`;
  document.getElementById("error").textContent = error ? String(error.message || error) : "";
}

function keepOptions(select, names) {
  const current = select.value;
  const wanted = names.join("\n");
  if (select.dataset.names !== wanted) {
    select.replaceChildren(...names.map((name) => new Option(name, name)));
    select.dataset.names = wanted;
  }
  if (names.includes(current)) select.value = current;
}

// -- overview ----------------------------------------------------------------------------------------
let slotsChart = null;

function drawSources(sources) {
  const tbody = document.querySelector("#sources-table tbody");
  fill(tbody, sources.map((s) => {
    const failed = document.createElement("div");
    failed.textContent = s.failed;
    const why = document.createElement("div");
    why.className = "reasons";
    why.textContent = reasons(s.failed_by_reason);
    failed.appendChild(why);
    const last = document.createElement("div");
    if (s.last_run) {
      last.append(outcomeBadge(s.last_run.outcome, s.last_run.outcome_words), ` ${s.last_run.run_id}`);
      if (s.last_run.reason) {
        const why = document.createElement("div");
        why.className = "reasons";
        why.textContent = s.last_run.reason;
        last.appendChild(why);
      }
    } else {
      last.textContent = "never";
    }
    const rejected = s.last_run ? percent(s.last_run.rejected_share) : "—";
    const drift = s.selector_drift.length ? flag(`selector drift: ${s.selector_drift.join(", ")}`) : "ok";
    const hosts = Object.entries(s.paused_hosts).map(([host, wait]) => `${host} (${wait}s)`).join(", ");
    return row([
      cell(s.name), cell(s.pending, "number"), cell(`${s.active} / ${s.max_active}`, "number"),
      cell(`${s.started_last_minute} / ${s.per_minute}`, "number"), cell(s.done, "number"), cell(failed),
      cell(s.dead_letters, "number"),
      cell((s.paused ? "source paused; " : "") + (hosts || "") + (s.pages_blocked ? `; ${s.pages_blocked} pages blocked` : "") +
        (s.host_unreachable ? `; ${s.host_unreachable} pages of unreachable hosts` : "") +
        (s.hosts ? `; ${hostsText(s.hosts)}; slowest: ${slowestText(s.hosts)}` : "")),
      cell(last, "last-run"), cell(rejected, "number rejected"), cell(drift, "drift"),
      cell(notModified(s), "number not-modified"),
    ], { "data-source": s.name, "data-outcome": s.last_run ? s.last_run.outcome : "" });
  }), "no sources yet");

  const health = [];
  for (const s of sources) {
    for (const a of s.extraction) {
      health.push(row([
        cell(s.name), cell(a.attribute), cell(percent(a.share), "number"), cell(percent(a.median), "number"),
        cell(a.median === null ? "—" : a.drop.toFixed(1), "number"),
        cell(a.drift ? flag("selector drift") : ""),
      ], { "data-source": s.name, "data-attribute": a.attribute, "data-drift": a.drift ? "yes" : "no" }));
    }
  }
  fill(document.querySelector("#health-table tbody"), health, "no reported run yet");
  const names = sources.map((s) => s.name);
  keepOptions(document.getElementById("job-source"), names);
  const withDead = sources.filter((s) => s.dead_letters > 0).map((s) => s.name);
  keepOptions(document.getElementById("dead-source"), withDead.length ? withDead : names);
}

// Incremental harvests: what 304s kept and saved, what a run changed.
function bytes(amount) {
  if (!amount) return "0 B";
  const units = ["B", "kB", "MB", "GB", "TB"];
  const power = Math.min(units.length - 1, Math.floor(Math.log10(amount) / 3));
  return `${(amount / 1000 ** power).toFixed(power ? 1 : 0)} ${units[power]}`;
}

function notModified(s) {
  return `${s.records_not_modified ?? 0} (${bytes(s.bytes_saved ?? 0)} saved)`;
}

function changes(report) {
  if (report.records_changed === undefined) return "";
  return `${report.records_new ?? 0} / ${report.records_changed} / ${report.records_unchanged ?? 0} / `
    + `${report.records_not_modified ?? 0}`;
}

function drawSlots(slots) {
  const countries = Object.keys(slots.by_country);
  const datasets = SLOT_STATES.map((state, i) => ({
    label: state, backgroundColor: STATE_COLOURS[i],
    data: countries.map((country) => slots.by_country[country][state] || 0),
  }));
  if (window.Chart) {
    if (!slotsChart) {
      slotsChart = new window.Chart(document.getElementById("slots-chart"), {
        type: "bar", data: { labels: countries, datasets },
        options: { animation: false, maintainAspectRatio: false, responsive: true,
          scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, ticks: { precision: 0 } } },
          plugins: { title: { display: true, text: "page slots per country by state" } } },
      });
    } else {
      slotsChart.data.labels = countries;
      slotsChart.data.datasets.forEach((dataset, i) => { dataset.data = datasets[i].data; });
      slotsChart.update();
    }
  }
  document.getElementById("slots-chart").dataset.slots = String(slots.slots.length);
  fill(document.querySelector("#proxy-table tbody"),
    Object.entries(slots.proxy_bytes).map(([country, bytes]) => row([cell(country), cell(bytes.toLocaleString(), "number")],
      { "data-country": country, "data-bytes": String(bytes) })),
    "no proxy traffic yet");
  // each proxy of each country's pool: in or out (backed off), what it carried, and the bans hosts gave it
  fill(document.querySelector("#proxy-pool-table tbody"),
    Object.entries(slots.proxies || {}).flatMap(([country, members]) => members.map((member) => row(
      [cell(country), cell(member.proxy), cell(member.state), cell(member.requests.toLocaleString(), "number"),
        cell(member.errors.toLocaleString(), "number"), cell(member.bans.toLocaleString(), "number"),
        cell(member.bytes.toLocaleString(), "number")],
      { "data-country": country, "data-proxy": member.proxy, "data-state": member.state }))),
    "no proxy of a pool has carried anything yet");
  // the allocator's decision as the sentences it logs, not JSON
  const decision = document.getElementById("last-decision");
  const sentences = slots.decision && slots.decision.length ? slots.decision : null;
  decision.replaceChildren(...(sentences || ["none yet"]).map((sentence) => {
    const li = document.createElement("li");
    li.textContent = sentence;
    if (!sentences) li.className = "muted";
    return li;
  }));
  document.getElementById("decided-at").textContent =
    slots.decided_at ? `at ${new Date(slots.decided_at).toLocaleTimeString()}` : "";
}

async function drawDeadLetters() {
  const source = document.getElementById("dead-source").value;
  const tbody = document.querySelector("#dead-letters tbody");
  if (!source) { fill(tbody, [], "no dead letters"); return; }
  const dead = await api(`sources/${encodeURIComponent(source)}/dead-letters?limit=100`);
  fill(tbody, dead.entries.map((entry) => row([
    cell(new Date(entry.failed_at).toLocaleString()), cell(entry.url), cell(entry.attempt, "number"),
    cell(entry.run_id), cell(entry.reason), cell(entry.snapshot ? snapshotLinks(source, entry.task_id, entry.screenshot) : ""),
  ], { class: "dead-letter", "data-task": entry.task_id || "" })), `no dead letters of ${source}`);
}

let shownRun = null;

async function drawRunRecords() {
  if (!shownRun) return;
  const [source, runId] = shownRun;
  const view = await api(`sources/${encodeURIComponent(source)}/runs/${encodeURIComponent(runId)}/records?limit=20`);
  const section = document.getElementById("run-records");
  section.hidden = false;
  section.dataset.run = runId;
  document.getElementById("run-records-name").textContent = `${source} ${runId}`;
  document.getElementById("run-records-outcome").replaceChildren(outcomeBadge(view.outcome, view.outcome_words));
  document.getElementById("run-records-reason").textContent = view.reason;
  document.getElementById("run-records-stored").textContent = view.records_stored;
  fill(document.querySelector("#run-rejections tbody"), view.rejections.map((entry) => row([
    cell(entry.url), cell(entry.reason), cell(entry.snapshot ? snapshotLinks(source, entry.task_id, entry.screenshot) : "", "evidence"),
  ], { class: "rejection", "data-task": entry.task_id || "" })), "no rejections or dead letters in this run");
  const fields = [...new Set(view.records.flatMap((record) => Object.keys(record)))]
    .filter((name) => !["_http", "first_seen_at", "changed_at", "run_id"].includes(name));
  const head = document.querySelector("#run-records-table thead tr");
  head.replaceChildren(...fields.map((name) => { const th = document.createElement("th"); th.textContent = name; return th; }));
  fill(document.querySelector("#run-records-table tbody"), view.records.map((record) => row(fields.map((name) => {
    const value = record[name];
    return cell(value !== null && typeof value === "object" ? JSON.stringify(value) : value);
  }), { class: "record" })), "no records stored by this run");
}

function showRun(source, runId) {
  shownRun = [source, runId];
  drawRunRecords().catch(setStatus);
}

// A browser page's evidence: its HTML (served sandboxed by the API) and its screenshot, each in a new tab.
function snapshotLinks(source, taskId, withScreenshot = true) {
  const base = `sources/${encodeURIComponent(source)}/dead-letters/${encodeURIComponent(taskId)}`;
  const links = document.createElement("span");
  const kinds = [["page", "snapshot"], ["screenshot", "screenshot"]].slice(0, withScreenshot ? 2 : 1);
  for (const [label, path] of kinds) {
    const link = document.createElement("a");
    link.href = new URL(`${base}/${path}`, API).href;
    link.target = "_blank";
    link.rel = "noopener noreferrer";
    link.className = `snapshot-${path}`;
    link.textContent = label;
    // Airflow's plugin frame may not open new tabs: a plain click shows the evidence on this page
    link.addEventListener("click", (event) => {
      if (event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
      event.preventDefault();
      showEvidence(source, taskId, path, link.href);
    });
    links.append(link, " ");
  }
  return links;
}

// The evidence viewer: the page's HTML in a sandboxed frame (the route also sends a sandbox CSP), or its screenshot.
function showEvidence(source, taskId, kind, href) {
  const section = document.getElementById("evidence");
  section.hidden = false;
  section.dataset.task = taskId;
  section.dataset.kind = kind;
  document.getElementById("evidence-name").textContent = `${source} ${taskId}`;
  const frame = document.getElementById("evidence-frame");
  const picture = document.getElementById("evidence-screenshot");
  frame.hidden = kind !== "snapshot";
  picture.hidden = kind !== "screenshot";
  if (kind === "snapshot") frame.src = href; else picture.src = href;
  section.scrollIntoView({ block: "nearest" });
}

async function drawRuns(sources) {
  const rows = [];
  for (const s of sources.slice(0, 20)) {
    const runs = await api(`sources/${encodeURIComponent(s.name)}/runs?limit=5`);
    for (const run of runs) {
      const report = run.report || {};
      const tr = row([
        cell(s.name), cell(run.run_id), cell(outcomeBadge(run.outcome, run.outcome_words), "outcome-cell"),
        cell(run.reason, "reason"),
        cell(run.started_at ? new Date(run.started_at).toLocaleString() : ""),
        cell(report.records_stored ?? "", "number"), cell(percent(run.rejected_share), "number rejected"),
        cell(progressText(run.progress) || hostsText(report.hosts), "progress"),
        cell((report.selector_drift || []).length ? flag(report.selector_drift.join(", ")) : ""),
        cell(changes(report), "number changes"),
      ], { "data-run": run.run_id, "data-source": s.name, "data-outcome": run.outcome, class: "clickable" });
      tr.addEventListener("click", () => showRun(s.name, run.run_id));
      rows.push(tr);
    }
  }
  fill(document.querySelector("#runs-table tbody"), rows, "no runs yet");
}

async function refreshOverview() {
  try {
    const [sources, slots] = await Promise.all([api("sources"), api("slots")]);
    drawSources(sources);
    drawSlots(slots);
    await drawDeadLetters();
    await drawRuns(sources);
    await drawRunRecords();
    setStatus(null);
  } catch (error) {
    setStatus(error);
  }
}

function startOverview() {
  document.getElementById("requeue").addEventListener("click", async () => {
    const source = document.getElementById("dead-source").value;
    const result = document.getElementById("requeue-result");
    try {
      const answer = await api(`sources/${encodeURIComponent(source)}/dead-letters/requeue`, { method: "POST" });
      result.textContent = `${answer.requeued} requeued, ${answer.remaining} left`;
    } catch (error) {
      result.textContent = `refused: ${error.message}`;
    }
    refreshOverview();
  });
  document.getElementById("evidence-close").addEventListener("click", () => {
    document.getElementById("evidence").hidden = true;
  });
  document.getElementById("dead-source").addEventListener("change", () => drawDeadLetters().catch(setStatus));
  document.getElementById("job-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const urls = document.getElementById("job-urls").value.split(/\s+/).filter(Boolean);
    const result = document.getElementById("job-result");
    try {
      const job = await api("jobs", {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ source: document.getElementById("job-source").value, urls }),
      });
      result.textContent = `started ${job.dag_run_id} (${job.urls} URLs)`;
      result.dataset.runId = job.dag_run_id;
    } catch (error) {
      result.textContent = `refused: ${error.message}`;
    }
  });
  refreshOverview();
  window.setInterval(refreshOverview, REFRESH_MS);
}

// -- the Harvest progress tab ------------------------------------------------------------------------
async function refreshRun() {
  const params = new URLSearchParams(window.location.search);
  const dagId = params.get("dag_id") || "";
  const runId = params.get("run_id") || "";
  document.getElementById("run-name").textContent = `${dagId} ${runId}`;
  const tbody = document.querySelector("#progress-table tbody");
  if (!dagId.startsWith("harvest_")) {
    fill(tbody, [], "not a harvest DAG: nothing to show");
    return;
  }
  try {
    const p = await api(`dag-runs/${encodeURIComponent(dagId)}/${encodeURIComponent(runId)}/progress`);
    const figures = [
      ["packages", `${p.packages_finished} / ${p.packages_total} finished (${p.packages_running} running, ${p.packages_waiting} waiting)`],
      ["pages stored", p.tasks_done], ["pages pending", p.tasks_pending], ["pages failed", p.tasks_failed],
      ["records stored", p.records_stored],
      ["pages per minute", p.pages_per_minute ?? "—"], ["ETA", p.complete ? "done" : (p.eta ?? "—")],
      ["failures", reasons(p.failures_by_reason) || "none"],
      ...(p.hosts ? [["hosts", hostsText(p.hosts)], ["slowest hosts", slowestText(p.hosts)]] : []),
    ];
    fill(tbody, figures.map(([name, value]) => row([cell(name), cell(value)], { "data-figure": name })));
    document.getElementById("progress-line").textContent = p.line;
    setStatus(null);
  } catch (error) {
    setStatus(error);
  }
}

if (document.body.dataset.page === "run") {
  refreshRun();
  window.setInterval(refreshRun, REFRESH_MS);
} else {
  startOverview();
}
