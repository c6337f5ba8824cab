// The operator's page: counts, the oldest pending job, paused types and failure groups,
// schedules (pause / resume), polled every few seconds; RetryFailed (a dry run's count first, then the real call
// once confirmed) and cancel. Every server text is set with textContent: job error
// messages are written by whoever made the job fail.
"use strict";

const $ = (id) => document.getElementById(id);
const POLL_MS = 3000;
const STATUSES = ["PENDING", "PROCESSING", "COMPLETED", "FAILED", "CANCELLED"];
let jobTypes = [];
let pollTimer = null;
let pendingRetry = null; // the filters of the dry run the operator may now confirm

const session = fetch("/api/session").then(async (response) => {
  if (response.status === 401) {
    window.location.assign("/login?next=/ops");
    return null;
  }
  return response.json();
}).catch(() => null);

async function writeHeaders() {
  const current = await session;
  const headers = { "Content-Type": "application/json" };
  if (current && current.csrfToken) headers["X-CSRF-Token"] = current.csrfToken;
  return headers;
}

function problemText(body, fallback) {
  const error = body && body.error;
  if (!error) return fallback;
  const fields = (error.fieldViolations || []).map((v) => `${v.field} ${v.description}`);
  return fields.length ? `${error.message}: ${fields.join("; ")}` : error.message;
}

// GET or POST some JSON; {ok, status, body}, or throws when san-web is unreachable.
async function call(path, payload) {
  const options = payload === undefined
    ? {}
    : { method: "POST", headers: await writeHeaders(), body: JSON.stringify(payload) };
  const response = await fetch(path, options);
  if (response.status === 401) window.location.assign("/login?next=/ops");
  let body = null;
  try { body = await response.json(); } catch (error) { body = null; }
  return { ok: response.ok, status: response.status, body };
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null ? "" : String(text);
  if (className) td.className = className;
  return td;
}

function row(...cells) {
  const tr = document.createElement("tr");
  tr.append(...cells);
  return tr;
}

function showError(message) {
  $("ops-error").textContent = message;
  $("ops-error").hidden = !message;
}

function formatAge(seconds) {
  const s = Math.floor(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

function fillTypeChoices(types) {
  if (jobTypes.length) return;
  jobTypes = types;
  for (const name of types) {
    const option = document.createElement("option");
    option.value = name;
    option.textContent = name;
    $("retry-type").appendChild(option);
  }
}

function showOverview(view) {
  fillTypeChoices(view.jobTypes);
  const who = view.user ? `${view.user} (${view.role})` : `local (${view.role})`;
  $("who").textContent = who;
  $("viewer-note").hidden = view.role !== "viewer";
  const counts = new Map(view.counts.map((c) => [`${c.jobType} ${c.status}`, c.count]));
  const head = document.createElement("tr");
  head.append(...["type", ...STATUSES].map((name, i) => {
    const th = document.createElement("th");
    th.textContent = name;
    if (i) th.className = "num";
    return th;
  }));
  $("counts").tHead.replaceChildren(head);
  $("counts").tBodies[0].replaceChildren(...view.jobTypes.map((type) => {
    const tr = row(cell(type));
    tr.id = `count-${type}`;
    for (const status of STATUSES) {
      const td = cell(counts.get(`${type} ${status}`) || 0, "num");
      td.dataset.status = status;
      tr.appendChild(td);
    }
    return tr;
  }));
  $("updated").textContent = `(as of ${view.now.slice(11, 19)} UTC)`;
  $("oldest-pending").textContent = view.oldestPending
    ? `${formatAge(view.oldestPending.ageSeconds)} old (created ${view.oldestPending.createTime})`
    : "none pending";
  $("paused").tBodies[0].replaceChildren(...view.paused.map((p) =>
    row(cell(p.jobType), cell(p.reason), cell(p.since), cell(p.until), cell(p.lastError, "message"))));
  $("paused").hidden = view.paused.length === 0;
  $("no-pauses").hidden = view.paused.length !== 0;
}

function useGroup(group) {
  $("retry-contains").value = group.messagePrefix;
  $("retry-hours").value = $("failures-hours").value;
  $("retry-preview").hidden = true;
  $("retry-contains").focus();
}

function showFailures(view) {
  $("failure-groups").tBodies[0].replaceChildren(...view.groups.map((group) => {
    const use = document.createElement("button");
    use.type = "button";
    use.className = "small";
    use.textContent = "retry these…";
    use.addEventListener("click", () => useGroup(group));
    const action = document.createElement("td");
    action.appendChild(use);
    return row(
      cell(group.count, "num"), cell(group.errorCode), cell(group.errorReason),
      cell(group.messagePrefix, "message"), cell(group.latestFailTime),
      cell(group.exampleJobId), action,
    );
  }));
  $("failure-groups").hidden = view.groups.length === 0;
  $("no-failures").hidden = view.groups.length !== 0;
  $("failures-truncated").hidden = !view.truncated;
}

let role = null; // the caller's, from the overview: only an operator gets the buttons
let listFailed = false; // the schedule error shown is the list's own

function showScheduleError(message) {
  $("schedule-error").textContent = message;
  $("schedule-error").hidden = !message;
}

async function changeSchedule(scheduleId, action) {
  showScheduleError("");
  let answer;
  try {
    answer = await call(`/api/ops/schedules/${action}`, { scheduleId });
  } catch (error) {
    return showScheduleError("Could not reach san-web.");
  }
  if (!answer.ok) return showScheduleError(problemText(answer.body, `HTTP ${answer.status}`));
  clearTimeout(pollTimer);
  refresh();
}

function showSchedules(view) {
  $("schedule-list").tBodies[0].replaceChildren(...view.schedules.map((s) => {
    const action = document.createElement("td");
    if (role === "operator") {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "small";
      button.textContent = s.paused ? "resume" : "pause";
      button.addEventListener("click", () => changeSchedule(s.scheduleId, s.paused ? "resume" : "pause"));
      action.appendChild(button);
    }
    const tr = row(
      cell(s.scheduleId), cell(s.period), cell(`${s.jobType} ${s.targetId}`),
      cell(s.nextFireTime), cell(s.lastFireTime), cell(s.lastJobId || "-"),
      cell(s.skippedCount, "num"),
      // Paused by no one: its owner's token was revoked or expired (pausedReason says).
      cell(s.paused ? (s.pausedReason ? `paused: ${s.pausedReason}` : "paused") : "running"),
      action,
    );
    tr.dataset.scheduleId = s.scheduleId;
    return tr;
  }));
  $("schedule-list").hidden = view.schedules.length === 0;
  $("no-schedules").hidden = view.schedules.length !== 0;
  $("schedules-truncated").hidden = !view.truncated;
}

async function refresh() {
  try {
    const overview = await call("/api/ops/overview");
    if (!overview.ok) {
      showError(problemText(overview.body, `HTTP ${overview.status}`));
    } else {
      role = overview.body.role;
      showOverview(overview.body);
      const schedules = await call("/api/ops/schedules");
      if (schedules.ok) {
        showSchedules(schedules.body);
        if (listFailed) showScheduleError(""); // a pause's error stays until the next click
        listFailed = false;
      } else {
        showScheduleError(problemText(schedules.body, `HTTP ${schedules.status}`));
        listFailed = true;
      }
      const hours = encodeURIComponent($("failures-hours").value);
      const groups = await call(`/api/ops/failures?hours=${hours}`);
      if (groups.ok) {
        showFailures(groups.body);
        showError("");
      } else {
        showError(problemText(groups.body, `HTTP ${groups.status}`));
      }
    }
  } catch (error) {
    showError("Could not reach san-web.");
  }
  pollTimer = setTimeout(refresh, POLL_MS);
}

$("failures-hours").addEventListener("change", () => {
  clearTimeout(pollTimer);
  refresh();
});

function retryFilters() {
  return {
    jobType: $("retry-type").value,
    errorMessageContains: $("retry-contains").value,
    failedWithinHours: Number($("retry-hours").value),
  };
}

function showRetryError(message) {
  $("retry-error").textContent = message;
  $("retry-error").hidden = !message;
}

$("retry-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  showRetryError("");
  $("retry-result").hidden = true;
  $("retry-skipped").replaceChildren();
  $("retry-preview").hidden = true;
  const filters = retryFilters();
  let answer;
  try {
    answer = await call("/api/ops/retry-failed", { ...filters, dryRun: true });
  } catch (error) {
    return showRetryError("Could not reach san-web.");
  }
  if (!answer.ok) return showRetryError(problemText(answer.body, `HTTP ${answer.status}`));
  const matched = answer.body.matchedCount;
  pendingRetry = filters;
  $("retry-count").textContent = matched === 1
    ? "1 failed job matches. Retry it?"
    : `${matched} failed jobs match.` + (matched ? " Retry them?" : "");
  $("retry-confirm").hidden = matched === 0;
  $("retry-confirm").textContent = matched === 1 ? "Retry 1 job" : `Retry ${matched} jobs`;
  $("retry-preview").hidden = false;
});

$("retry-abandon").addEventListener("click", () => {
  pendingRetry = null;
  $("retry-preview").hidden = true;
});

$("retry-confirm").addEventListener("click", async () => {
  if (!pendingRetry) return;
  const filters = pendingRetry;
  pendingRetry = null;
  $("retry-preview").hidden = true;
  let answer;
  try {
    answer = await call("/api/ops/retry-failed", { ...filters, dryRun: false });
  } catch (error) {
    return showRetryError("Could not reach san-web.");
  }
  if (!answer.ok) return showRetryError(problemText(answer.body, `HTTP ${answer.status}`));
  const moved = answer.body;
  const skipped = moved.skipped.length ? `; ${moved.skipped.length} skipped` : "";
  $("retry-result").textContent = `Moved ${moved.retriedCount} of ${moved.matchedCount} matched jobs back to PENDING${skipped}.`;
  $("retry-result").hidden = false;
  $("retry-skipped").replaceChildren(...moved.skipped.map((s) => {
    const li = document.createElement("li");
    li.textContent = `${s.jobId}: ${s.reason}`;
    return li;
  }));
  clearTimeout(pollTimer);
  refresh();
});

$("cancel-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  $("cancel-result").hidden = true;
  $("cancel-error").hidden = true;
  let answer;
  try {
    answer = await call("/api/ops/cancel", {
      jobId: $("cancel-job-id").value.trim(),
      reason: $("cancel-reason").value,
    });
  } catch (error) {
    answer = { ok: false, status: 0, body: { error: { message: "Could not reach san-web." } } };
  }
  if (!answer.ok) {
    $("cancel-error").textContent = problemText(answer.body, `HTTP ${answer.status}`);
    $("cancel-error").hidden = false;
    return;
  }
  $("cancel-result").textContent = `Job ${answer.body.jobId} is ${answer.body.status}.`;
  $("cancel-result").hidden = false;
  clearTimeout(pollTimer);
  refresh();
});

refresh();
