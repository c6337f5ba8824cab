// The san page: post a scrap, then follow its job live over Server-Sent Events.
"use strict";

const $ = (id) => document.getElementById(id);
const TERMINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);
let source = null;
let pollTimer = null;

// Who is logged in, and the CSRF token every write must carry (none with --auth off).
const session = fetch("/api/session").then(async (response) => {
  if (response.status === 401) {
    window.location.assign("/login");
    return null;
  }
  const body = await response.json();
  if (body.auth === "off") {
    $("no-login").hidden = false;
  } else {
    $("username").textContent = body.username;
    $("who").hidden = false;
  }
  return body;
}).catch(() => null);

async function writeHeaders() {
  const current = await session;
  const headers = { "Content-Type": "application/json" };
  if (current && current.csrfToken) headers["X-CSRF-Token"] = current.csrfToken;
  return headers;
}

$("logout").addEventListener("click", async () => {
  finish();
  try {
    await fetch("/api/session", { method: "DELETE", headers: await writeHeaders() });
  } finally {
    window.location.assign("/login");
  }
});

function problemText(body, fallback) {
  const error = body && body.error;
  if (!error) return fallback;
  const fields = (error.fieldViolations || []).map((v) => `${v.field} ${v.description}`);
  return fields.length ? `${error.message}: ${fields.join("; ")}` : error.message;
}

// A PENDING job whose type is paused (its AI provider fails or throttles) says so
// rather than just "PENDING". Times are UTC, as in the timeline.
function waitingText(waiting) {
  const since = waiting.since.slice(11, 16);
  const until = waiting.until.slice(11, 19);
  if (waiting.reason === "RATE_LIMITED") {
    return `Waiting: the AI provider has been limiting requests since ${since}; resuming at ${until}`;
  }
  return `Waiting: the AI provider has been unavailable since ${since}; retrying (next try at ${until})`;
}

function show(job) {
  $("status").textContent = job.waiting ? waitingText(job.waiting) : job.status;
  $("status").className = `status ${job.status}`;
  $("attempt").textContent = job.maxAttempts ? `(attempt ${job.attemptCount} of ${job.maxAttempts})` : "";
  if ($("timeline").children.length === 0) {
    // First sight of the job: show where it has been before now.
    for (const step of job.history || []) {
      if (step.status === job.status && step.time === job.updateTime) continue;
      const past = document.createElement("li");
      const at = step.time && step.time !== "-" ? step.time.slice(11, 19) : "";
      past.textContent = `${at} ${step.status}` + (step.errorMessage ? ` — ${step.errorMessage}` : "");
      past.className = "past";
      $("timeline").appendChild(past);
    }
  }
  // One line per state of the job: news that leaves the job as it was (its type's
  // pause moved on, as it does every few seconds through an outage) rewrites the
  // last line instead of adding one with the same time.
  const state = `${job.status} ${job.updateTime}`;
  const timeline = $("timeline");
  const last = timeline.lastElementChild;
  const item = last && last.dataset.state === state ? last : document.createElement("li");
  const when = job.updateTime && job.updateTime !== "-" ? job.updateTime.slice(11, 19) : "";
  const notes = [job.errorMessage, job.waiting && waitingText(job.waiting)].filter(Boolean);
  item.textContent = `${when} ${job.status}` + (notes.length ? ` — ${notes.join(" · ")}` : "");
  item.dataset.state = state;
  if (item !== last) timeline.appendChild(item);
  if (!TERMINAL.has(job.status)) return;
  finish();
  if (job.status === "COMPLETED" && job.result) {
    showResult(job.result);
  } else {
    const reason = job.status === "CANCELLED" ? "The job was cancelled." : (job.errorMessage || "The job failed.");
    $("error").textContent = `${reason} (after ${job.attemptCount} attempt${job.attemptCount === 1 ? "" : "s"})`;
    $("failure").hidden = false;
  }
}

// A scrap's job (CARD_ANALYSIS) answers with a summary and tags; a job of any other
// type shows its result's fields as they come (the server sends every type alike).
function showResult(result) {
  const { summary, tags, model, ...others } = result;
  $("summary").textContent = summary || "";
  $("summary-heading").hidden = summary === undefined;
  $("tags").replaceChildren(...(tags || []).map((tag) => {
    const li = document.createElement("li");
    li.textContent = tag;
    return li;
  }));
  $("tags-heading").hidden = tags === undefined;
  $("result-fields").replaceChildren(...Object.entries(others).flatMap(([name, value]) => {
    const term = document.createElement("dt");
    term.textContent = name;
    const text = document.createElement("dd");
    text.textContent = typeof value === "string" ? value : JSON.stringify(value);
    return [term, text];
  }));
  $("result").hidden = false;
}

function finish() {
  if (source) { source.close(); source = null; }
  if (pollTimer) { clearTimeout(pollTimer); pollTimer = null; }
  $("submit").disabled = false;
}

function fail(message) {
  finish();
  $("error").textContent = message;
  $("failure").hidden = false;
}

// What show() tells apart: the status, and for a waiting job what it waits for.
const shownState = (job) => job && `${job.status} ${JSON.stringify(job.waiting || null)}`;

// If the live stream is lost for good, ask for the job once a second instead.
async function poll(jobId, lastStatus) {
  try {
    const response = await fetch(`/api/async-jobs/${jobId}`);
    const body = await response.json();
    if (!response.ok) return fail(problemText(body, `HTTP ${response.status}`));
    if (shownState(body) !== lastStatus) show(body);
    if (!TERMINAL.has(body.status)) pollTimer = setTimeout(() => poll(jobId, shownState(body)), 1000);
  } catch (error) {
    pollTimer = setTimeout(() => poll(jobId, lastStatus), 2000);
  }
}

function follow(jobId) {
  let last = null;
  source = new EventSource(`/api/async-jobs/${jobId}/events`);
  source.addEventListener("job", (event) => {
    last = JSON.parse(event.data);
    show(last);
  });
  source.addEventListener("problem", (event) => fail(problemText(JSON.parse(event.data), "Lost the job service.")));
  source.addEventListener("end", () => { if (source) { source.close(); source = null; } });
  source.addEventListener("error", () => {
    if (source && source.readyState === EventSource.CLOSED) {
      source = null;
      poll(jobId, shownState(last));
    }
  });
}

// The scrap is saved; its job exists once the outbox has handed it to JobService.
// Until then ask for the scrap every second, and follow the job as soon as it has one.
const QUEUED_TEXT = "queued — the job service is not reachable yet";

async function awaitJob(scrapId, handoff) {
  if (handoff && handoff.state === "refused") {
    return fail(`JobService refused this scrap: ${handoff.reason || "no reason given"}`);
  }
  $("status").textContent = handoff && handoff.reason ? QUEUED_TEXT : "queued";
  $("status").className = "status QUEUED";
  try {
    const response = await fetch(`/api/scraps/${scrapId}`);
    const body = await response.json();
    if (!response.ok) return fail(problemText(body, `HTTP ${response.status}`));
    if (body.jobId) return startFollowing(body.jobId);
    if (body.handoff && body.handoff.state === "refused") return awaitJob(scrapId, body.handoff);
    $("status").textContent = body.handoff && body.handoff.reason ? QUEUED_TEXT : "queued";
  } catch (error) {
    // san-web itself is away for a moment: keep asking.
  }
  pollTimer = setTimeout(() => awaitJob(scrapId, null), 1000);
}

function startFollowing(jobId) {
  $("job-id").textContent = jobId;
  $("status").textContent = "-";
  $("status").className = "status";
  follow(jobId);
}

$("scrap-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  finish();
  $("form-error").hidden = true;
  $("submit").disabled = true;
  const payload = { title: $("title").value, url: $("url").value, text: $("text").value };
  let response, body;
  try {
    response = await fetch("/api/scraps", {
      method: "POST",
      headers: await writeHeaders(),
      body: JSON.stringify(payload),
    });
    body = await response.json();
  } catch (error) {
    $("submit").disabled = false;
    $("form-error").textContent = "Could not reach san-web.";
    $("form-error").hidden = false;
    return;
  }
  if (!response.ok) {
    $("submit").disabled = false;
    $("form-error").textContent = problemText(body, `HTTP ${response.status}`);
    $("form-error").hidden = false;
    return;
  }
  $("job-id").textContent = "";
  $("timeline").replaceChildren();
  $("result").hidden = true;
  $("failure").hidden = true;
  $("job").hidden = false;
  if (body.jobId) startFollowing(body.jobId);
  else awaitJob(body.scrapId, body.handoff);
});
