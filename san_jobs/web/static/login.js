// The login page: POST /api/session, then on to the page (the session is a cookie).
"use strict";

const field = (id) => document.getElementById(id);
// Where to go once logged in: the page that sent us here (`?next=/ops`), if it is one
// of ours; anything else is ignored, so the link cannot lead off the site.
const RETURN_PAGES = ["/", "/ops"];
const wanted = new URLSearchParams(window.location.search).get("next");
const next = RETURN_PAGES.includes(wanted) ? wanted : "/";

field("login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  field("login-error").hidden = true;
  field("login").disabled = true;
  let response, body;
  try {
    response = await fetch("/api/session", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ username: field("username").value, password: field("password").value }),
    });
    body = await response.json();
  } catch (error) {
    body = { error: { message: "Could not reach san-web." } };
  }
  field("login").disabled = false;
  if (response && response.ok) {
    window.location.assign(next);
    return;
  }
  field("login-error").textContent = (body && body.error && body.error.message) || `HTTP ${response.status}`;
  field("login-error").hidden = false;
});
