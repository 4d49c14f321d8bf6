// Cellbind desk: the dispatcher board, served by every cell at /desk/.
//
// The session lives in an HttpOnly cookie this script never sees. Every unsafe request
// carries the CSRF proof (the readable `__Host-cellbind_csrf` cookie echoed in the
// `X-Cellbind-Csrf` header); reads need nothing but the cookie.
//
// Sign-in posts to the cell this page came from. When that cell answers WRONG_CELL, the page
// follows it once, and only to a cell listed in the placement map this cell holds: it submits
// the credentials to the owner's `/desk/sign-in` in a top-level form POST, and the owner's edge
// signs in, sets its cookies and lands the browser on its /desk/. The session never reaches a
// script: no cell answers a session to another origin (and browsers refuse a SameSite=Strict
// cookie set by a cross-site fetch anyway). If the owner names yet another cell, the owner's
// desk shows the disagreement as an error; it is never followed twice.
'use strict';

const CSRF_COOKIE = '__Host-cellbind_csrf';
const CSRF_HEADER = 'X-Cellbind-Csrf';
const IDEMPOTENCY_HEADER = 'Idempotency-Key';
/** Background refresh of the board, in milliseconds. */
const REFRESH_MS = 15000;

const MESSAGES = {
  SESSION_MISSING: '',
  SESSION_REVOKED: 'Your session was revoked. Please sign in again.',
  SESSION_EXPIRED: 'Your session has expired. Please sign in again.',
  SESSION_INVALID: 'Your session is not valid here. Please sign in again.',
  INVALID_CREDENTIALS: 'Contractor, login or password is not right.',
  UNKNOWN_CONTRACTOR: 'No cell serves this contractor.',
  WRONG_CELL: 'Your company is now served by another cell. Please sign in again.',
  FORBIDDEN: 'The cell refused this request.',
  INVALID_REQUEST: 'Please check the contractor id and login.',
  CELLS_DISAGREE: 'The cells disagree about who serves this contractor. Please report this.',
  RATE_LIMITED: 'Too many sign-in attempts. Try again in a minute.',
  HANDOFF_IN_PROGRESS: 'Your company is moving between cells. Try again in a few seconds.',
  UPSTREAM_UNAVAILABLE: 'The cell cannot sign you in right now. Try again.',
};

const $ = (id) => document.getElementById(id);

let readOnly = false;
let refreshTimer = null;
/** Idempotency key per job, kept until the completion is acknowledged (retries reuse it). */
const pendingKeys = new Map();

function say(text) {
  $('status').textContent = text;
}

function csrfToken() {
  for (const part of document.cookie.split(';')) {
    const [name, ...rest] = part.trim().split('=');
    if (name === CSRF_COOKIE) return rest.join('=');
  }
  return '';
}

function codeOf(r) {
  return r.body && typeof r.body.error === 'string' ? r.body.error : '';
}

async function call(url, init) {
  try {
    const resp = await fetch(url, { cache: 'no-store', ...init });
    let body = null;
    const type = resp.headers.get('content-type') || '';
    if (type.includes('json')) {
      try { body = await resp.json(); } catch (_) { body = null; }
    }
    return { status: resp.status, body, retryAfter: resp.headers.get('retry-after') };
  } catch (_) {
    return { status: 0, body: null, retryAfter: null };
  }
}

function here(method, path, headers, body) {
  const h = { ...headers };
  if (method !== 'GET' && method !== 'HEAD') h[CSRF_HEADER] = csrfToken();
  return call(path, { method, credentials: 'same-origin', headers: h, body });
}

function showSignIn(message) {
  stopRefresh();
  $('board').hidden = true;
  $('sign-out').hidden = true;
  $('sign-in').hidden = false;
  $('sign-in-message').textContent = message || '';
  $('password').value = '';
  $('contractor').focus();
}

function setReadOnly(on, retryAfter) {
  readOnly = on;
  $('handoff').hidden = !on;
  if (on && retryAfter) {
    $('handoff-text').textContent = 'This contractor is being moved to another cell. The board is '
      + `read-only for a moment (retry in about ${retryAfter} s).`;
  }
  for (const b of document.querySelectorAll('button.complete')) {
    b.disabled = on || b.dataset.done === 'true';
  }
}

/** Everything that is not a success, in one place. */
function refused(r, what) {
  const code = codeOf(r);
  if (r.status === 401) {
    const text = MESSAGES[code] !== undefined ? MESSAGES[code] : 'Please sign in.';
    showSignIn(text);
    say(text);
    return;
  }
  if (r.status === 409 && code === 'HANDOFF_IN_PROGRESS') {
    setReadOnly(true, r.retryAfter);
    say(`${what}: the board is read-only while this contractor moves.`);
    return;
  }
  if (r.status === 409 && code === 'WRONG_CELL') {
    showSignIn(MESSAGES.WRONG_CELL);
    return;
  }
  if (r.status === 429) {
    say(`${what}: too many requests. Try again in ${r.retryAfter || 'a few'} seconds.`);
    return;
  }
  if (r.status === 0) {
    say(`${what}: the cell cannot be reached. Try again.`);
    return;
  }
  if (r.status >= 500) {
    say(`${what}: the cell is unavailable right now (${code || r.status}). Try again shortly.`);
    return;
  }
  say(`${what}: ${(r.body && r.body.message) || MESSAGES[code] || 'refused'} (${code || r.status}).`);
}

function cell(text, cls) {
  const td = document.createElement('td');
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function render(route) {
  $('board-contractor').textContent = route.contractor_id;
  $('board-date').textContent = route.date;
  const jobs = Array.isArray(route.jobs) ? route.jobs : [];
  const done = jobs.filter((j) => j.status === 'completed').length;
  $('board-done').textContent = `${done} of ${jobs.length}`;
  const rows = jobs.map((job) => {
    const tr = document.createElement('tr');
    tr.className = job.status === 'completed' ? 'completed' : 'pending';
    tr.dataset.job = job.job_id;
    tr.append(cell(job.job_id), cell(job.address), cell(job.window),
      cell(job.status === 'completed' ? 'Completed' : 'Pending', 'status-cell'));
    const td = document.createElement('td');
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'complete';
    b.textContent = job.status === 'completed' ? 'Done' : 'Complete';
    b.dataset.done = String(job.status === 'completed');
    b.setAttribute('aria-label', `Complete job ${job.job_id}`);
    b.disabled = readOnly || job.status === 'completed';
    b.addEventListener('click', () => complete(job.job_id, b));
    td.append(b);
    tr.append(td);
    return tr;
  });
  $('jobs-body').replaceChildren(...rows);
}

function showBoard(route) {
  $('sign-in').hidden = true;
  $('board').hidden = false;
  $('sign-out').hidden = false;
  render(route);
  startRefresh();
}

async function loadBoard(announce) {
  const r = await here('GET', '/api/routes/today');
  if (r.status === 200 && r.body) {
    showBoard(r.body);
    if (announce) say(announce);
    return true;
  }
  refused(r, 'Loading the board');
  return false;
}

async function complete(jobId, button) {
  if (readOnly) return;
  button.disabled = true;
  let key = pendingKeys.get(jobId);
  if (!key) {
    key = crypto.randomUUID();
    pendingKeys.set(jobId, key);
  }
  say(`Completing job ${jobId}…`);
  const r = await here('POST', `/api/jobs/${encodeURIComponent(jobId)}/complete`,
    { [IDEMPOTENCY_HEADER]: key });
  if (r.status >= 200 && r.status < 300) {
    pendingKeys.delete(jobId);
    await loadBoard(`Job ${jobId} completed.`);
    return;
  }
  button.disabled = false;
  refused(r, `Completing job ${jobId}`);
}

function startRefresh() {
  if (refreshTimer === null) {
    refreshTimer = setInterval(() => { loadBoard(); }, REFRESH_MS);
  }
}

function stopRefresh() {
  if (refreshTimer !== null) {
    clearInterval(refreshTimer);
    refreshTimer = null;
  }
}

/** Origins of the fleet's cells, from the placement map this cell holds. */
async function fleetOrigins() {
  const r = await call('/v1/placement-map', { credentials: 'omit' });
  const cells = r.body && r.body.map && Array.isArray(r.body.map.cells) ? r.body.map.cells : [];
  const out = new Set();
  for (const c of cells) {
    try { out.add(new URL(c.endpoint).origin); } catch (_) { /* not a URL: ignore */ }
  }
  return out;
}

function signInAt(ownerOrigin, creds) {
  const form = document.createElement('form');
  form.method = 'POST';
  form.action = `${ownerOrigin}/desk/sign-in`;
  form.hidden = true;
  for (const name of ['contractor_id', 'login', 'password']) {
    const input = document.createElement('input');
    input.type = 'hidden';
    input.name = name;
    input.value = creds[name];
    form.append(input);
  }
  document.body.append(form);
  form.submit();
}

function signInFailed(r) {
  const code = codeOf(r);
  let text;
  if (r.status === 429) {
    text = `Too many sign-in attempts. Try again in ${r.retryAfter || 'a few'} seconds.`;
  } else if (r.status === 409 && code === 'HANDOFF_IN_PROGRESS') {
    text = `Your company is moving between cells. Try again in ${r.retryAfter || 'a few'} seconds.`;
  } else if (r.status === 0) {
    text = 'The cell cannot be reached. Try again.';
  } else {
    text = MESSAGES[code] || (r.body && r.body.message) || `Sign-in failed (${r.status}).`;
  }
  $('sign-in-message').textContent = text;
  say(text);
}

async function signIn(ev) {
  ev.preventDefault();
  const creds = {
    contractor_id: $('contractor').value.trim(),
    login: $('login').value.trim(),
    password: $('password').value,
    client: 'desk',
  };
  if (!creds.contractor_id || !creds.login || !creds.password) {
    $('sign-in-message').textContent = 'Contractor, login and password are all needed.';
    return;
  }
  const submit = $('sign-in-submit');
  submit.disabled = true;
  $('sign-in-message').textContent = '';
  say('Signing in…');
  try {
    const body = JSON.stringify(creds);
    const headers = { 'Content-Type': 'application/json' };
    const r = await call('/v1/sessions', { method: 'POST', credentials: 'same-origin', headers, body });
    if (r.status === 201) {
      $('password').value = '';
      await loadBoard('Signed in.');
      return;
    }
    if (!(r.status === 409 && codeOf(r) === 'WRONG_CELL')) {
      signInFailed(r);
      return;
    }
    // Follow WRONG_CELL once, and only to a cell of the fleet.
    let owner = null;
    try { owner = new URL(r.body.owner_endpoint).origin; } catch (_) { owner = null; }
    if (owner === null || !(await fleetOrigins()).has(owner)) {
      signInFailed({ status: 409, body: { message: 'This cell named an owner that is not in the fleet.' } });
      return;
    }
    say(`Your company is served by ${r.body.owner_cell}; signing in there…`);
    signInAt(owner, creds);
    $('password').value = '';
  } finally {
    submit.disabled = false;
  }
}

async function signOut() {
  stopRefresh();
  const r = await here('DELETE', '/v1/sessions/current');
  if (r.status === 204 || r.status === 401) {
    showSignIn('You are signed out.');
    say('Signed out.');
    return;
  }
  refused(r, 'Signing out');
}

function start() {
  $('cell-origin').textContent = window.location.host;
  $('sign-in-form').addEventListener('submit', signIn);
  $('refresh').addEventListener('click', () => { loadBoard('Board refreshed.'); });
  $('sign-out').addEventListener('click', signOut);
  $('handoff-retry').addEventListener('click', () => {
    setReadOnly(false);
    loadBoard('Retrying.');
  });
  const params = new URLSearchParams(window.location.search);
  const error = params.get('error');
  if (error !== null) {
    window.history.replaceState(null, '', window.location.pathname);
    showSignIn(MESSAGES[error] || `Sign-in failed (${error}).`);
    return;
  }
  loadBoard();
}

start();
