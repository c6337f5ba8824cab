// The san page: post a scrap, then follow its job live over Server-Sent Events; below,
// the list of your scraps with their knowledge cards (san-web's own, GET /api/scraps),
// each with its related scraps. Submitting never waits for another scrap's job: the
// section above follows the newest one, the list follows every one still in flight.
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
  if (waiting.reason === "DEPENDENCIES") {
    const count = (waiting.jobIds || []).length;
    return `Waiting for ${count} job${count === 1 ? "" : "s"} it depends on`;
  }
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
  refreshSoon();
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
  $("submit").disabled = false;  // the next scrap need not wait for this one's job
  if (!response.ok) {
    $("form-error").textContent = problemText(body, `HTTP ${response.status}`);
    $("form-error").hidden = false;
    return;
  }
  $("text").value = "";
  $("title").value = "";
  $("url").value = "";
  refreshSoon();
  $("scrap-title").hidden = true;
  $("related-box").hidden = true;
  $("job-id").textContent = "";
  $("timeline").replaceChildren();
  $("result").hidden = true;
  $("failure").hidden = true;
  $("job").hidden = false;
  if (body.jobId) startFollowing(body.jobId);
  else awaitJob(body.scrapId, body.handoff);
});

// ---- Your scraps: their cards, newest first, read from san-web (survives a reload) ----

const ACTIVE = new Set(["queued", "PENDING", "PROCESSING"]);
const jobStates = new Map();     // job id -> its last known status (JobService's)
const relatedCache = new Map();  // scrap id -> its related scraps, while the cards stay the same
let cardsKey = "";
let listTimer = null;
let listed = [];                 // the first page's scraps, as last read
let olderToken = "";
let cardWaits = 0;               // list refreshes spent waiting for completed jobs' cards

function element(tag, className, text) {
  const made = document.createElement(tag);
  if (className) made.className = className;
  if (text !== undefined) made.textContent = text;
  return made;
}

const scrapLink = (scrapId) => `/?scrap=${encodeURIComponent(scrapId)}`;
const scrapName = (item) => item.title || (item.excerpt || "").slice(0, 80) || item.scrapId;

// Where a scrap stands: its card if it has one, else its hand-off or its job's status.
function scrapState(item) {
  if (item.card) return "COMPLETED";
  if (item.handoff && item.handoff.state === "refused") return "REFUSED";
  if (!item.jobId) return "queued";
  return jobStates.get(item.jobId) || "PENDING";
}

function renderCard(box, card) {
  box.replaceChildren();
  if (!card) return;
  box.appendChild(element("p", "card-summary", card.summary));
  const tags = element("ul", "card-tags");
  for (const tag of card.tags) tags.appendChild(element("li", "", tag));
  box.appendChild(tags);
}

function renderRelated(list, related) {
  list.replaceChildren(...related.map((other) => {
    const item = element("li");
    const link = element("a", "", other.title || other.scrapId);
    link.href = scrapLink(other.scrapId);
    item.appendChild(link);
    item.appendChild(element("span", "score", ` ${other.score.toFixed(2)}`));
    return item;
  }));
}

async function loadRelated(scrapId, list) {
  if (relatedCache.has(scrapId)) return renderRelated(list, relatedCache.get(scrapId));
  try {
    const response = await fetch(`/api/scraps/${encodeURIComponent(scrapId)}/related`);
    if (!response.ok) return;
    const related = (await response.json()).related;
    relatedCache.set(scrapId, related);
    renderRelated(list, related);
  } catch (error) {
    // san-web away for a moment: the next refresh asks again.
  }
}

function scrapItem(item) {
  const li = element("li", "scrap");
  li.dataset.scrapId = item.scrapId;
  const head = element("p", "scrap-head");
  const link = element("a", "open", scrapName(item));
  link.href = scrapLink(item.scrapId);
  head.appendChild(link);
  const state = scrapState(item);
  const badge = element("span", `scrap-status status ${state}`, state === "COMPLETED" && !item.card ? "COMPLETED · card on its way" : state);
  head.appendChild(badge);
  li.appendChild(head);
  const card = element("div", "card");
  renderCard(card, item.card);
  li.appendChild(card);
  if (item.card) {
    const box = element("div", "related-box");
    box.appendChild(element("h4", "", "Related"));
    const list = element("ul", "related");
    box.appendChild(list);
    li.appendChild(box);
    loadRelated(item.scrapId, list);
  }
  return li;
}

// The job statuses of listed scraps without a card (JobService's: live state only).
async function learnStates(items) {
  const asking = items.filter((item) => !item.card && item.jobId && !TERMINAL.has(jobStates.get(item.jobId)));
  await Promise.all(asking.map(async (item) => {
    try {
      const response = await fetch(`/api/async-jobs/${item.jobId}`);
      if (response.ok) jobStates.set(item.jobId, (await response.json()).status);
      else if (response.status === 404) jobStates.set(item.jobId, "UNKNOWN");
    } catch (error) {
      // asked again at the next refresh
    }
  }));
}

// A list the page polls: its body, or null with the reason shown in `errorId` (the
// caller tries again later).
async function readListing(url, errorId, what) {
  try {
    const response = await fetch(url);
    const body = await response.json();
    if (!response.ok) throw new Error(problemText(body, `HTTP ${response.status}`));
    $(errorId).hidden = true;
    return body;
  } catch (error) {
    $(errorId).textContent = `Could not read your ${what}: ${error.message}`;
    $(errorId).hidden = false;
    return null;
  }
}

async function loadScraps() {
  listTimer = null;
  const body = await readListing("/api/scraps?pageSize=20", "scraps-error", "scraps");
  if (!body) {
    listTimer = setTimeout(loadScraps, 5000);
    return;
  }
  listed = body.scraps;
  // A new card can be anyone's nearest: related lists are asked again when cards change.
  const key = listed.map((item) => (item.card ? item.card.jobId : "")).join(",");
  if (key !== cardsKey) { relatedCache.clear(); cardsKey = key; }
  await learnStates(listed);
  $("scraps").replaceChildren(...listed.map(scrapItem));
  olderToken = body.nextPageToken;
  $("more").hidden = !olderToken;
  $("scraps-empty").hidden = listed.length > 0;
  const states = listed.map(scrapState);
  if (states.some((state) => ACTIVE.has(state))) {
    cardWaits = 0;
    listTimer = setTimeout(loadScraps, 1500);
  } else if (states.includes("COMPLETED") && listed.some((item) => !item.card) && cardWaits < 40) {
    // A finished job's card reaches san-web's table through the change feed.
    cardWaits += 1;
    listTimer = setTimeout(loadScraps, 3000);
  }
}

function refreshSoon() {
  if (listTimer) clearTimeout(listTimer);
  cardWaits = 0;
  listTimer = setTimeout(loadScraps, 200);
}

$("more").addEventListener("click", async () => {
  if (!olderToken) return;
  const response = await fetch(`/api/scraps?pageSize=20&pageToken=${encodeURIComponent(olderToken)}`);
  const body = await response.json();
  if (!response.ok) return;
  await learnStates(body.scraps);
  for (const item of body.scraps) $("scraps").appendChild(scrapItem(item));
  olderToken = body.nextPageToken;
  $("more").hidden = !olderToken;
});

// A scrap's own view (/?scrap=ID): its card and related scraps from san-web, and its
// job's road while JobService still keeps the job.
async function openScrap(scrapId) {
  $("job").hidden = false;
  const response = await fetch(`/api/scraps/${encodeURIComponent(scrapId)}`);
  const body = await response.json();
  if (!response.ok) return fail(problemText(body, `HTTP ${response.status}`));
  $("scrap-title").textContent = scrapName({ ...body, excerpt: body.text });
  $("scrap-title").hidden = false;
  if (body.card) {
    showResult({ summary: body.card.summary, tags: body.card.tags, model: body.card.model });
    $("related-box").hidden = false;
    loadRelated(scrapId, $("related"));
  }
  if (!body.jobId) return awaitJob(scrapId, body.handoff);
  $("job-id").textContent = body.jobId;
  const job = await fetch(`/api/async-jobs/${body.jobId}`);
  if (job.ok) return follow(body.jobId);
  $("status").textContent = body.card ? "COMPLETED" : "-";
  $("status").className = `status ${body.card ? "COMPLETED" : ""}`;
}

// The days: each one's "today I learned" note and its recall quiz (GET /api/days).
let shownDay = null;
let dayReading = 0;
let dayTimer = null;
let daysTimer = null;
const DAY_BUSY = new Set(["MAKING", "OPEN"]);

async function loadDays() {
  daysTimer = null;
  const body = await readListing("/api/days", "days-error", "days");
  if (!body) {
    daysTimer = setTimeout(loadDays, 5000);
    return;
  }
  $("days-when").textContent = `Your days end at ${body.tilAt} (${body.timeZone}).`;
  $("days-empty").hidden = body.days.length > 0;
  $("day-list").replaceChildren(...body.days.map((day) => {
    const item = element("li");
    const button = element("button", day.day === shownDay ? "current" : "", `${day.day} · ${day.note ? day.note.title : day.status}`);
    button.dataset.day = day.day;
    button.addEventListener("click", () => openDay(day.day));
    item.appendChild(button);
    return item;
  }));
  daysTimer = setTimeout(loadDays, body.days.some((day) => DAY_BUSY.has(day.status)) ? 3000 : 15000);
}

function quizItem(question) {
  const item = element("li");
  item.appendChild(element("p", "question", question.question));
  const answer = element("p", "answer", question.answer);
  answer.hidden = true;
  const reveal = element("button", "reveal", "Show the answer");
  reveal.type = "button";
  reveal.addEventListener("click", () => { answer.hidden = false; reveal.hidden = true; });
  item.appendChild(reveal);
  item.appendChild(answer);
  const source = element("p", "source", "From: ");
  if (question.scrapId) {
    const link = element("a", "", question.sourceTitle || "the scrap");
    link.href = scrapLink(question.scrapId);
    source.appendChild(link);
  } else {
    source.appendChild(document.createTextNode(question.sourceTitle || "the day's note"));
  }
  item.appendChild(source);
  return item;
}

// The quiz shows one question at a time: its answer on request, then the next.
let quiz = [];
let quizAt = 0;
let quizKey = "";

function showQuestion() {
  $("quiz-count").textContent = `Question ${quizAt + 1} of ${quiz.length}`;
  $("quiz").replaceChildren(quizItem(quiz[quizAt]));
  $("quiz-next").hidden = quiz.length < 2;
}

$("quiz-next").addEventListener("click", () => {
  quizAt = (quizAt + 1) % quiz.length;
  showQuestion();
});

async function openDay(day) {
  shownDay = day;
  if (dayTimer) { clearTimeout(dayTimer); dayTimer = null; }
  for (const button of $("day-list").querySelectorAll("button")) button.classList.toggle("current", button.dataset.day === day);
  // Only the latest reading is shown: an older one answered late would undo it.
  const reading = ++dayReading;
  const response = await fetch(`/api/days/${encodeURIComponent(day)}`);
  const body = await response.json();
  if (shownDay !== day || reading !== dayReading) return;
  $("day").hidden = false;
  $("day-heading").textContent = day;
  if (!response.ok) {
    $("day-status").textContent = "";
    $("day-error").textContent = problemText(body, `HTTP ${response.status}`);
    return;
  }
  $("day-status").textContent = body.status;
  $("day-status").className = `status ${body.status}`;
  $("day-error").textContent = body.status === "OPEN" ? ` ends at ${body.endsAt.slice(11, 16)} UTC` : (body.error || "");
  if (body.failedScrap) {
    // The scrap whose card failed: retry it, then make the day again.
    const link = element("a", "", body.failedScrap.title || "a scrap");
    link.href = scrapLink(body.failedScrap.scrapId);
    $("day-error").append(": the card of ", link, " failed");
  }
  $("day-note").hidden = !body.note;
  if (body.note) {
    $("day-note-title").textContent = body.note.title;
    $("day-note-body").textContent = body.note.body;
  }
  // A big day's note is made from the cards that fit the AI gateway's limit.
  const cards = body.cards;
  $("day-cards").hidden = !cards || cards.covered >= cards.of;
  if (cards) $("day-cards").textContent = `This note covers ${cards.covered} of the day's ${cards.of} cards.`;
  $("day-generate").textContent = body.status === "OPEN" ? "Make it now" : "Make it again";
  $("day-generate").disabled = body.status === "MAKING";
  $("quiz-box").hidden = body.questions.length === 0;
  // The same questions polled again keep the one shown (and its answer, if revealed).
  const key = day + JSON.stringify(body.questions);
  if (key !== quizKey) {
    quizKey = key;
    quiz = body.questions;
    quizAt = 0;
    if (quiz.length) showQuestion(); else $("quiz").replaceChildren();
  }
  $("day-scraps").replaceChildren(...body.scraps.map((scrap) => {
    const item = element("li");
    const link = element("a", "", scrap.title || scrap.scrapId);
    link.href = scrapLink(scrap.scrapId);
    item.appendChild(link);
    return item;
  }));
  if (body.status === "MAKING") dayTimer = setTimeout(() => openDay(day), 1500);
}

$("day-generate").addEventListener("click", async () => {
  if (!shownDay) return;
  const day = shownDay;
  $("day-generate").disabled = true;
  try {
    const response = await fetch(`/api/days/${encodeURIComponent(day)}/generate`, { method: "POST", headers: await writeHeaders() });
    const body = await response.json();
    $("day-generate-error").hidden = response.ok;
    if (!response.ok) $("day-generate-error").textContent = problemText(body, `HTTP ${response.status}`);
  } finally {
    $("day-generate").disabled = false;
  }
  await openDay(day);
  if (daysTimer) clearTimeout(daysTimer);
  loadDays();
});

session.then((current) => {
  if (!current) return;  // on the way to /login
  const wanted = new URLSearchParams(window.location.search).get("scrap");
  if (wanted) openScrap(wanted);
  loadScraps();
  loadDays();
  const day = new URLSearchParams(window.location.search).get("day");
  if (day) openDay(day);
});
