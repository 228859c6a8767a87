// The lease-worker console: polls /api/status once a second and draws what it says.
// Plain browser JavaScript, no library and no network beyond this worker.
"use strict";

const COLORS = { received: "#344054", succeeded: "#12805c", retry: "#b54708", failed: "#b42318",
  discarded: "#7a5af8", timed_out: "#c11574", lease_lost: "#f04438", shutdown: "#667085",
  skipped: "#98a2b3", duplicate: "#0086c9" };

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function seconds(value) {
  const s = Math.max(0, value);
  if (s < 60) return s.toFixed(1) + " s";
  if (s < 3600) return Math.floor(s / 60) + " m " + Math.floor(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " m";
}

// Per-second rates between neighbouring history points, per series.
function rates(points, queue) {
  const series = {};
  for (let i = 1; i < points.length; i++) {
    const before = points[i - 1].queues[queue] || {}, after = points[i].queues[queue] || {};
    const dt = points[i].at - points[i - 1].at;
    if (dt <= 0) continue;
    for (const name of Object.keys(after)) {
      const delta = Math.max(0, after[name] - (before[name] || 0));
      (series[name] = series[name] || []).push([points[i].at, delta / dt]);
    }
  }
  return series;
}

function plot(canvas, series, from, to) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth, height = canvas.clientHeight;
  canvas.width = width * ratio; canvas.height = height * ratio;
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.clearRect(0, 0, width, height);
  let top = 0;
  for (const points of Object.values(series)) for (const [, v] of points) top = Math.max(top, v);
  top = top > 0 ? top * 1.1 : 1;
  ctx.strokeStyle = "#e4e7ec"; ctx.beginPath(); ctx.moveTo(0, height - 0.5); ctx.lineTo(width, height - 0.5); ctx.stroke();
  ctx.fillStyle = "#667085"; ctx.font = "11px system-ui"; ctx.fillText(top.toFixed(1) + "/s", 2, 11);
  for (const [name, points] of Object.entries(series)) {
    if (!points.some(([, v]) => v > 0)) continue;
    ctx.strokeStyle = COLORS[name] || "#101828"; ctx.lineWidth = 1.5; ctx.beginPath();
    points.forEach(([t, v], i) => {
      const x = (t - from) / Math.max(1, to - from) * width, y = height - v / top * (height - 14);
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
    });
    ctx.stroke();
  }
}

function drawQueues(status) {
  const box = document.getElementById("queues");
  const points = status.history.points;
  const from = points.length ? points[0].at : status.worker.now, to = status.worker.now;
  box.replaceChildren();
  for (const queue of status.queues) {
    const card = el("article", { class: "queue", "data-queue": queue.queue });
    card.append(el("h3", {}, queue.queue));
    const done = Object.values(queue.outcomes).reduce((a, b) => a + b, 0);
    card.append(el("p", { class: "meta" }, `handler ${queue.handler} · received ${queue.received} · handled ${done}`));
    const limit = queue.max_in_flight;
    card.append(el("p", { class: "meta in-flight" }, `in flight ${queue.in_flight} of ${limit}` +
      (queue.in_flight_limit ? ` (queue quota ${queue.in_flight_limit.toLocaleString()})` : "")));
    const bar = el("div", { class: "bar" }), fill = el("span");
    fill.style.width = Math.min(100, 100 * queue.in_flight / Math.max(1, limit)) + "%";
    bar.append(fill); card.append(bar);
    const canvas = el("canvas", { "aria-label": `messages per second on ${queue.queue}` });
    card.append(canvas);
    const series = rates(points, queue.queue);
    const legend = el("div", { class: "legend" });
    for (const name of Object.keys(series)) {
      if (!series[name].some(([, v]) => v > 0)) continue;
      const item = el("span"), swatch = el("i");
      swatch.style.background = COLORS[name] || "#101828";
      item.append(swatch, document.createTextNode(name)); legend.append(item);
    }
    card.append(legend);
    box.append(card);
    plot(canvas, series, from, to);
  }
}

function drawMessages(status) {
  const body = document.querySelector("#messages tbody");
  body.replaceChildren();
  for (const m of status.messages) {
    const row = el("tr", { class: m.state, "data-message-id": m.message_id });
    row.append(el("td", {}, m.queue), el("td", { class: "id" }, m.message_id), el("td", {}, m.handler),
      el("td", { class: "num receives" }, String(m.receive_count)), el("td", { class: "num held" }, seconds(m.held_s)),
      el("td", { class: "num renewals" }, String(m.renewals)),
      el("td", { class: "num deadline" + (m.deadline_in_s < 2 ? " soon" : ""), "data-seconds": String(m.deadline_in_s) }, seconds(m.deadline_in_s)),
      el("td", { class: "lease-state" }, m.state));
    body.append(row);
  }
  const more = status.messages_total > status.messages.length ? ` (first ${status.messages.length})` : "";
  document.getElementById("messages-total").textContent = `${status.messages_total}${more}`;
}

async function refresh() {
  const state = document.getElementById("worker-state");
  try {
    const answer = await fetch("/api/status", { cache: "no-store" });
    if (!answer.ok) throw new Error(String(answer.status));
    const status = await answer.json();
    document.getElementById("worker-name").textContent =
      status.worker.name === "lease-worker" ? "" : status.worker.name;
    state.textContent = `${status.worker.state} · pid ${status.worker.pid} · up ${seconds(status.worker.now - status.worker.started_at)}`;
    state.className = "state " + status.worker.state;
    drawQueues(status);
    drawMessages(status);
    document.getElementById("updated").textContent = new Date().toLocaleTimeString();
  } catch (error) {
    state.textContent = "no answer from the worker (" + error.message + ")";
    state.className = "state down";
  }
}

// Dead-letter queues: listed every 5 s; a redrive needs the worker's console token (kept
// in this tab's sessionStorage) and the queue's name typed back.
async function redrive(queue) {
  let token = sessionStorage.getItem("lease-worker-token");
  if (!token) token = window.prompt("Console token (LEASE_WORKER_CONSOLE_TOKEN):") || "";
  const typed = window.prompt(`Move every message of ${queue} back to its source queue? Type ${queue} to confirm:`);
  if (typed === null) return;
  const answer = await fetch("/api/dlq/redrive", {
    method: "POST",
    headers: { "Content-Type": "application/json", "Authorization": "Bearer " + token },
    body: JSON.stringify({ queue, confirm: typed }),
  });
  const result = await answer.json();
  if (answer.ok) sessionStorage.setItem("lease-worker-token", token);
  else if (answer.status === 401) sessionStorage.removeItem("lease-worker-token");
  window.alert(answer.ok ? `Move task started on ${queue}.` : `Refused (${answer.status}): ${result.error}`);
  refreshDeadLetters();
}

async function refreshDeadLetters() {
  const body = document.querySelector("#dead-letters tbody");
  try {
    const answer = await fetch("/api/dlq", { cache: "no-store" });
    const listing = await answer.json();
    body.replaceChildren();
    for (const q of listing.dead_letter_queues || []) {
      const row = el("tr", { "data-queue": q.queue });
      const task = q.tasks.length ? `${q.tasks[0].status} (${q.tasks[0].moved} moved)` : "none";
      const action = el("td");
      if (listing.actions && q.visible > 0) {
        const button = el("button", { type: "button" }, "Redrive…");
        button.addEventListener("click", () => redrive(q.queue));
        action.append(button);
      }
      row.append(el("td", {}, q.queue), el("td", {}, q.sources.join(", ")),
        el("td", { class: "num" }, String(q.visible)), el("td", { class: "num" }, String(q.in_flight)),
        el("td", {}, task), action);
      body.append(row);
    }
    if (!body.children.length) {
      const none = el("tr");
      none.append(el("td", { colspan: "6" }, "none"));
      body.append(none);
    }
  } catch (error) {
    body.replaceChildren();
  }
}

refresh();
refreshDeadLetters();
setInterval(refresh, 1000);
setInterval(refreshDeadLetters, 5000);
