// toolgate console: plain JavaScript, no build step, no library. Every view reads and
// writes through the gateway's /v1 JSON API; the session cookie authenticates, and the
// session's token goes in x-toolgate-csrf on every change. Data is put in the page with
// textContent only, never as HTML, and with the characters that change how text is shown
// without being seen written out as escapes (visible below).
'use strict';

const session = { csrf: null, me: null };
const VIEWS = ['queue', 'history', 'pins', 'tools', 'mine'];
const $ = (id) => document.getElementById(id);

// Characters a caller, an upstream or a user id could use to make the page say something
// else than the data: bidirectional controls (U+202E makes `evil` read `live`, a file
// `x\u202Etxt.exe` read `xexe.txt`), control characters (but tab and line breaks), and
// every character Unicode draws as nothing: zero-width ones, the soft hyphen, the tag
// characters (U+E0000 to U+E007F, which spell ASCII unseen, so an instruction to a model
// can ride in text the approver reads as harmless) and variation selectors (which can
// carry any bytes behind one emoji). Each is shown as `\uXXXX`, one per UTF-16 unit,
// which in JSON is the same string.
const HIDDEN = /(?![\t\n\r])[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}]/gu;
const visible = (text) => String(text).replace(HIDDEN, (c) => c.split('').map(
  (unit) => `\\u${unit.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}`).join(''));

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === 'text') node.textContent = visible(value);
    else if (value !== null && value !== undefined && value !== false) {
      node.setAttribute(name, name === 'aria-label' ? visible(value) : value);
    }
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function say(text, isError) {
  const status = $('status');
  status.textContent = visible(text);
  status.className = isError ? 'error' : '';
}

async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && session.csrf) headers['X-Toolgate-Csrf'] = session.csrf;
  const response = await fetch(path, {
    method, headers, credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  if (response.status !== 204) {
    try { data = await response.json(); } catch (_) { data = null; }
  }
  if (!response.ok) {
    const error = new Error((data && data.error && data.error.message) || `the gateway answered ${response.status}`);
    error.status = response.status;
    error.code = data && data.error ? data.error.code : null;
    if (response.status === 401 && session.me) signedOut('Your session has ended: sign in again.');
    throw error;
  }
  return data;
}

const json = (value) => visible(JSON.stringify(value, null, 2));

function when(text) {
  if (!text) return 'never';
  const at = new Date(text);
  return Number.isNaN(at.getTime()) ? text : at.toLocaleString();
}

// ---- sign-in

function signedIn(me) {
  session.me = me;
  forgetLists();
  session.csrf = me.csrf_token;
  $('view-sign-in').hidden = true;
  $('nav').hidden = false;
  $('account').hidden = false;
  $('who').textContent = visible(`${named(me.user, me.tenant)}${me.approver ? ' (approver)' : ''}`);
  for (const link of document.querySelectorAll('#nav [data-approver]')) link.hidden = !me.approver;
  // Pins and tool statistics cover every tenant: an approver of one tenant is not shown them.
  for (const link of document.querySelectorAll('#nav [data-operator]')) link.hidden = !operator(me);
  $('not-approver').hidden = me.approver;
  const wanted = location.hash.slice(1);
  const view = allowed(wanted) ? wanted : (me.approver ? 'queue' : 'mine');
  if (location.hash !== `#${view}`) window.history.replaceState(null, '', `#${view}`);
  show(view);
}

function signedOut(message) {
  session.me = null;
  session.csrf = null;
  for (const view of VIEWS) $(`view-${view}`).hidden = true;
  $('nav').hidden = true;
  $('account').hidden = true;
  $('view-sign-in').hidden = false;
  say(message || '');
  api('GET', '/console/sign-in').then((ways) => {
    $('sign-in-form').hidden = !ways.api_key;
    $('oauth-sign-in').hidden = !ways.oauth;
    if (ways.api_key) $('key').focus();
  }, () => $('key').focus());
}

const OPERATOR_VIEWS = ['pins', 'tools'];
const operator = (me) => me.approver && !me.tenant;
const allowed = (view) => Boolean(session.me) && VIEWS.includes(view)
  && (view === 'mine' || (OPERATOR_VIEWS.includes(view) ? operator(session.me) : session.me.approver));

$('sign-in-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const key = $('key');
  try {
    const me = await api('POST', '/console/session', { key: key.value });
    key.value = '';
    say(`Signed in as ${visible(named(me.user, me.tenant))}.`);
    signedIn(me);
  } catch (error) {
    say(error.message, true);
    key.select();
  }
});

$('sign-out').addEventListener('click', async () => {
  try { await api('DELETE', '/console/session'); } catch (_) { /* ended already */ }
  signedOut('Signed out.');
});

// ---- views

function show(view) {
  if (!allowed(view)) return;
  for (const name of VIEWS) $(`view-${name}`).hidden = name !== view;
  for (const link of document.querySelectorAll('#nav a')) {
    if (link.dataset.view === view) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  load(view);
}

window.addEventListener('hashchange', () => {
  const view = location.hash.slice(1);
  if (VIEWS.includes(view)) show(view);
});

for (const button of document.querySelectorAll('[data-refresh]')) {
  button.addEventListener('click', () => load(button.dataset.refresh));
}

async function load(view) {
  try {
    await LOADERS[view]();
  } catch (error) {
    say(error.message, true);
  }
}

// A caller is a user id in a tenant: ann of acme and ann of globex are two people. Named
// in a sentence or a label as `ann · acme`; shown in a card or a row as the id with the
// tenant beside it, set apart.
const named = (user, tenant) => (tenant ? `${user} · ${tenant}` : user);
function caller(tag, attrs, user, tenant) {
  return el(tag, attrs, el('span', { class: 'user', text: user }),
    tenant ? el('span', { class: 'tenant', text: ` · ${tenant}` }) : null);
}

// Whether `call` is the signed-in user's own, and so theirs to withdraw but not to approve:
// with `four_eyes`, the gateway refuses an approval of one's own call (by the user id
// alone, in any tenant, as it checks it).
const ownUnderFourEyes = (call) => Boolean(session.me && session.me.four_eyes && call.user === session.me.user);

function waitingCard(call, decide) {
  const facts = el('dl', {},
    el('dt', { text: 'Caller' }), caller('dd', { class: 'caller' }, call.user, call.tenant),
    el('dt', { text: 'Why it waits' }), el('dd', { class: 'reason', text: call.reason || call.stage || 'approval' }),
    el('dt', { text: 'Waiting since' }), el('dd', { text: when(call.suspended_at) }),
    el('dt', { text: 'Expires' }), el('dd', { class: 'expires', text: when(call.expires_at) }),
    el('dt', { text: 'Id' }), el('dd', { class: 'id', text: call.id }));
  const card = el('article', { class: 'card', 'data-id': call.id, 'aria-label': `${call.tool} by ${named(call.user, call.tenant)}` },
    el('h3', { text: call.tool }), facts,
    el('p', { class: 'label', text: 'Input (as it will run, redacted)' }),
    el('pre', { class: 'json input', tabindex: '0', text: json(call.input) }));
  if (decide) card.append(decisionForm(call, card));
  return card;
}

function decisionForm(call, card) {
  const id = `reason-${call.id}`;
  const own = ownUnderFourEyes(call);
  const reason = el('input', { id, name: 'reason', autocomplete: 'off' });
  const approve = own ? null : el('button', { type: 'button', class: 'approve', text: 'Approve' });
  const reject = el('button', { type: 'button', class: 'reject', text: 'Reject' });
  const note = own ? el('p', { class: 'note own', role: 'note', text: 'This is your own call: another approver must approve it (four eyes). You may reject it to withdraw it.' }) : null;
  const form = el('form', { class: 'decide' },
    note, el('label', { for: id, text: 'Reason' }), reason, el('div', { class: 'buttons' }, approve, reject));
  // Enter in the reason field decides nothing: a decision is a press of its own button.
  form.addEventListener('submit', (event) => event.preventDefault());
  const who = named(call.user, call.tenant);
  const buttons = [approve, reject].filter(Boolean);
  const decide = async (decision) => {
    const body = { decision };
    if (reason.value.trim()) body.reason = reason.value.trim();
    for (const button of buttons) button.disabled = true;
    let decided = true;
    try {
      const result = await api('POST', `/v1/suspensions/${encodeURIComponent(call.id)}/resume`, body);
      // Past this request's deadline the decision goes on (202 `running`), not yet known to have taken the call.
      const running = result && result.status === 'running';
      say(running ? `${call.tool} for ${who}: your decision is still being carried out; if the call is back in the queue, another approver decided first or it changed.`
        : decision !== 'approve' ? `Rejected ${call.tool} for ${who}.`
          : `Approved ${call.tool} for ${who}: it ran${result && result.output !== undefined ? ' and answered' : ''}.`);
    } catch (error) {
      // A rejected call answers as its caller is told: 403 `rejected`.
      if (decision === 'reject' && error.code === 'rejected') say(`Rejected ${call.tool} for ${who}.`);
      else {
        decided = false;
        say(`${call.tool}: ${error.message}`, true);
      }
    }
    // Decided here, the card goes at once; otherwise the reload says whether it still waits.
    if (decided) forgetCard(card);
    else for (const button of buttons) button.disabled = false;
    await load('queue');
  };
  if (approve) approve.addEventListener('click', () => decide('approve'));
  reject.addEventListener('click', () => decide('reject'));
  return form;
}

function empty(text) {
  return el('p', { class: 'empty', text });
}

// ---- paging: every list says how much of it is shown, and offers more when there is more

// Calls or decisions a page asks for, and the most the queue keeps shown: the API's largest
// page, so that the queue's refresh every five seconds is one request, however many pages
// the approver opened.
const PAGE = 100;
const MOST_SHOWN = 500;

function counted(view, text, more) {
  $(`${view}-count`).textContent = text;
  $(`${view}-more`).hidden = !more;
}

const calls = (n) => (n === 1 ? '1 call' : `${n} calls`);

// ---- the queue: kept up to date card by card
//
// The queue refreshes itself every five seconds while an approver may be typing a reason
// into one of its cards: a card is never rebuilt, so what is typed and where the focus is
// stay. A call that comes is added at the end, so no card moves down under the pointer. A
// call that goes (another approver decided it, its caller withdrew it, it expired) is
// marked as gone where it is, and removed at the approver's next action (a decision, a
// refresh, more calls asked for) — at once when the approver is not in the queue: neither
// pointer nor focus in it, and nothing typed into the card.
const queue = { window: PAGE, next: null, cards: new Map(), asked: 0, applied: 0 };

function forgetCard(card) {
  queue.cards.delete(card.dataset.id);
  card.remove();
}

function markGone(card) {
  if (card.classList.contains('gone')) return;
  card.classList.add('gone');
  for (const button of card.querySelectorAll('button')) button.disabled = true;
  // Read-only rather than disabled: a disabled field would drop the focus.
  for (const input of card.querySelectorAll('input')) input.readOnly = true;
  card.append(el('p', { class: 'note gone-note', role: 'note', text: 'No longer waiting: another approver decided it, or its caller withdrew it, or it expired. It goes at your next action.' }));
}

function tallyQueue() {
  const box = $('queue');
  const live = [...queue.cards.values()].filter((card) => !card.classList.contains('gone')).length;
  const blank = box.querySelector(':scope > p.empty');
  if (queue.cards.size && blank) blank.remove();
  if (!queue.cards.size && !blank) box.append(empty('Nothing is waiting.'));
  if (!queue.next) counted('queue', live ? `${calls(live)} waiting.` : '', false);
  else if (queue.window < MOST_SHOWN) counted('queue', `${calls(live)} shown; more are waiting.`, true);
  else counted('queue', `${calls(live)} shown, the most the queue shows at once; more are waiting, and come in as these are decided.`, false);
}

// `explicit`: the approver asked (a view opened, Refresh, a decision), rather than the timer.
async function loadQueue(explicit = true) {
  const asked = ++queue.asked;
  const data = await api('GET', `/v1/suspensions?limit=${queue.window}`);
  // An answer overtaken by a later one is not applied over it.
  if (asked < queue.applied) return;
  queue.applied = asked;
  const box = $('queue');
  const waiting = new Set(data.suspensions.map((call) => call.id));
  // The listing is by id: past `next_cursor` are the calls beyond the window, which still wait.
  const beyond = (id) => Boolean(data.next_cursor) && id > data.next_cursor;
  const present = box.contains(document.activeElement) || box.matches(':hover');
  for (const [id, card] of queue.cards) {
    if (waiting.has(id) || beyond(id)) continue;
    const busy = present || card.querySelector('input[name=reason]').value !== '';
    if (explicit || !busy) forgetCard(card);
    else markGone(card);
  }
  for (const call of data.suspensions) {
    if (queue.cards.has(call.id)) continue;
    const card = waitingCard(call, true);
    queue.cards.set(call.id, card);
    box.append(card);
  }
  queue.next = data.next_cursor;
  tallyQueue();
}

async function moreQueue() {
  if (!queue.next) return;
  const asked = ++queue.asked;
  const data = await api('GET', `/v1/suspensions?limit=${PAGE}&cursor=${encodeURIComponent(queue.next)}`);
  // A refresh asked before this (for the smaller window) is not applied after it.
  if (asked < queue.applied) return;
  queue.applied = asked;
  queue.window = Math.min(queue.window + PAGE, MOST_SHOWN);
  for (const card of [...queue.cards.values()]) if (card.classList.contains('gone')) forgetCard(card);
  for (const call of data.suspensions) {
    if (queue.cards.has(call.id)) continue;
    const card = waitingCard(call, true);
    queue.cards.set(call.id, card);
    $('queue').append(card);
  }
  queue.next = data.next_cursor;
  tallyQueue();
}

// What was shown to the previous user of this page is not shown to the next.
function forgetLists() {
  queue.cards.clear();
  Object.assign(queue, { window: PAGE, next: null, applied: queue.asked });
  decided.window = PAGE;
  for (const box of ['queue', 'mine']) $(box).replaceChildren();
  $('history').tBodies[0].replaceChildren();
  for (const view of ['queue', 'mine', 'history']) counted(view, '', false);
}

// ---- my calls: a page at a time, following `next_cursor`

const mine = { next: null, shown: 0 };

function mineQuery() {
  // Mine: my id in my tenant. An approver without a tenant named ann would otherwise list
  // the calls of ann of every tenant.
  const me = session.me;
  const tenant = me.tenant ? `tenant=${encodeURIComponent(me.tenant)}` : 'no_tenant=true';
  return `/v1/suspensions?user=${encodeURIComponent(me.user)}&${tenant}&limit=${PAGE}`;
}

function tallyMine() {
  if (!mine.shown) counted('mine', '', false);
  else counted('mine', mine.next ? `${calls(mine.shown)} shown; more of yours are waiting.` : `${calls(mine.shown)} waiting.`, Boolean(mine.next));
}

async function loadMine() {
  const data = await api('GET', mineQuery());
  const box = $('mine');
  box.replaceChildren(...data.suspensions.map((call) => waitingCard(call, false)));
  if (!data.suspensions.length) box.append(empty('None of your calls is waiting.'));
  mine.next = data.next_cursor;
  mine.shown = data.suspensions.length;
  tallyMine();
}

async function moreMine() {
  if (!mine.next) return;
  const data = await api('GET', `${mineQuery()}&cursor=${encodeURIComponent(mine.next)}`);
  const box = $('mine');
  const shown = new Set([...box.querySelectorAll('article')].map((card) => card.dataset.id));
  const fresh = data.suspensions.filter((call) => !shown.has(call.id));
  box.append(...fresh.map((call) => waitingCard(call, false)));
  mine.next = data.next_cursor;
  mine.shown += fresh.length;
  tallyMine();
}

$('lookup-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const out = $('lookup');
  try {
    const call = await api('GET', `/v1/suspensions/${encodeURIComponent($('lookup-id').value.trim())}`);
    out.textContent = json(call);
    say(`That call is ${call.status}.`);
  } catch (error) {
    out.textContent = visible(error.message);
  }
  out.hidden = false;
});

// The decided history has no cursor: the newest `limit` (at most 500, all it keeps of a
// tenant), newest first. One more than shown is asked for, to know whether there is more.
const decided = { window: PAGE };

async function loadHistory() {
  const asked = Math.min(decided.window + 1, MOST_SHOWN);
  const data = await api('GET', `/v1/admin/decisions?limit=${asked}`);
  const more = data.decisions.length > decided.window;
  const shown = data.decisions.slice(0, decided.window);
  const rows = shown.map((d) => el('tr', { class: d.decision },
    el('td', { text: when(d.decided_at) }), el('td', { text: d.tool }), caller('td', { class: 'caller' }, d.user, d.tenant),
    caller('td', { class: 'approver' }, d.decided_by, d.decided_by_tenant), el('td', { class: 'decision', text: d.decision }),
    el('td', { class: 'reason', text: d.reason || '' }), el('td', { text: d.outcome })));
  $('history').tBodies[0].replaceChildren(...rows);
  if (!rows.length) $('history').tBodies[0].append(el('tr', {}, el('td', { colspan: '7', text: 'Nothing decided yet.' })));
  const decisions = (n) => (n === 1 ? '1 decision' : `${n} decisions`);
  if (!rows.length) counted('history', '', false);
  else if (more) counted('history', `The newest ${decisions(rows.length)} shown; older ones are kept.`, true);
  else if (rows.length >= MOST_SHOWN) counted('history', `The newest ${decisions(rows.length)} shown, the most the console shows; the audit trail has them all.`, false);
  else counted('history', `${decisions(rows.length)}, all that are kept.`, false);
}

// A line diff of two JSON texts: the lines alike at both ends, and between them a longest
// common subsequence — when the changed lines are few enough. An upstream is not trusted:
// two long definitions would make the table n×m, and hang the tab. Past DIFF_CELLS the
// changed lines are shown removed, then added, unmatched, and `cut` says so.
const DIFF_CELLS = 1000000;
const DIFF_SHOWN = 4000;

function diff(before, after) {
  const a = before.split('\n');
  const b = after.split('\n');
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let end = 0;
  while (end < a.length - start && end < b.length - start && a[a.length - 1 - end] === b[b.length - 1 - end]) end++;
  const lines = a.slice(0, start).map((line) => [' ', line]);
  const n = a.length - start - end;
  const m = b.length - start - end;
  let cut = null;
  let hidden = 0;
  if ((n + 1) * (m + 1) > DIFF_CELLS) {
    // Half of what is shown for each side, so that the new lines are seen too.
    cut = `${n} lines changed into ${m}, too many to match: the old ones are shown removed, then the new ones added`;
    const half = DIFF_SHOWN / 2;
    for (let i = 0; i < Math.min(n, half); i++) lines.push(['-', a[start + i]]);
    for (let j = 0; j < Math.min(m, half); j++) lines.push(['+', b[start + j]]);
    hidden = Math.max(n - half, 0) + Math.max(m - half, 0);
  } else {
    const width = m + 1;
    const lcs = new Int32Array((n + 1) * width);
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i * width + j] = a[start + i] === b[start + j]
          ? lcs[(i + 1) * width + j + 1] + 1
          : Math.max(lcs[(i + 1) * width + j], lcs[i * width + j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && a[start + i] === b[start + j]) { lines.push([' ', a[start + i]]); i++; j++; }
      else if (i < n && (j === m || lcs[(i + 1) * width + j] >= lcs[i * width + j + 1])) { lines.push(['-', a[start + i]]); i++; }
      else { lines.push(['+', b[start + j]]); j++; }
    }
  }
  for (let k = a.length - end; k < a.length; k++) lines.push([' ', a[k]]);
  if (lines.length > DIFF_SHOWN) {
    hidden += lines.length - DIFF_SHOWN;
    lines.length = DIFF_SHOWN;
  }
  if (hidden) {
    cut = `${cut ? `${cut}; ` : ''}${hidden} more lines are not shown (the whole definitions: GET /v1/admin/pins)`;
  }
  return { lines, cut };
}

async function loadPins() {
  const data = await api('GET', '/v1/admin/pins');
  const box = $('pins');
  const cards = Object.entries(data.pending).map(([tool, change]) => {
    const pinned = data.pins[tool] ? data.pins[tool].definition : null;
    const pre = el('pre', { class: 'diff', tabindex: '0', 'aria-label': `changes to ${tool}` });
    const { lines, cut } = diff(json(pinned), json(change.definition));
    for (const [mark, line] of lines) {
      pre.append(el('span', { class: mark === '+' ? 'add' : mark === '-' ? 'del' : 'same', text: `${mark} ${line}\n` }));
    }
    const note = cut ? [el('p', { class: 'cut', role: 'note', text: `The diff is cut: ${cut}.` })] : [];
    const accept = el('button', { type: 'button', class: 'accept', text: `Accept the new ${tool}` });
    accept.addEventListener('click', async () => {
      accept.disabled = true;
      try {
        const done = await api('POST', `/v1/admin/pins/${encodeURIComponent(tool)}/accept`);
        say(`Accepted ${tool}: ${done.note}.`);
      } catch (error) {
        say(`${tool}: ${error.message}`, true);
      }
      await load('pins');
    });
    return el('article', { class: 'card', 'data-tool': tool },
      el('h3', { text: tool }),
      el('p', { class: 'label', text: `pinned ${change.pinned}, offered ${change.offered}` }),
      ...note, pre, accept);
  });
  // Pins of tools no upstream offers any more: kept (pins never expire) until forgotten.
  const gone = (data.gone || []).map((tool) => {
    const forget = el('button', { type: 'button', class: 'forget', text: `Forget the pin of ${tool}` });
    forget.addEventListener('click', async () => {
      forget.disabled = true;
      try {
        const done = await api('DELETE', `/v1/admin/pins/${encodeURIComponent(tool)}`);
        say(`Forgot ${tool}: ${done.note}.`);
      } catch (error) {
        say(`${tool}: ${error.message}`, true);
      }
      await load('pins');
    });
    return el('article', { class: 'card', 'data-tool': tool, 'data-gone': '' },
      el('h3', { text: `${tool} (gone)` }),
      el('p', { text: 'No upstream of this gateway offers this tool any more. Its pin is kept until it is forgotten; a tool of this name offered after that is trusted afresh.' }),
      el('p', { class: 'label', text: `pinned ${data.pins[tool].fingerprint}` }),
      forget);
  });
  box.replaceChildren(...cards, ...gone);
  if (!cards.length) box.prepend(empty(`No definition is held back. ${Object.keys(data.pins).length} pinned.`));
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = visible(text);
  return node;
}

async function loadTools() {
  const data = await api('GET', '/v1/admin/stats');
  $('since').textContent = when(data.since);
  $('counted-by').textContent = visible(data.counted_by || 'this replica');
  const tools = data.tools;
  const chart = $('chart');
  const row = 28;
  const label = 110;
  const width = 600;
  const most = Math.max(1, ...tools.map((t) => t.calls));
  chart.setAttribute('viewBox', `0 0 ${width} ${Math.max(1, tools.length) * row + 4}`);
  chart.replaceChildren();
  tools.forEach((t, i) => {
    const y = i * row + 4;
    chart.append(svg('text', { x: label - 6, y: y + 16, class: 'name', 'text-anchor': 'end' }, t.tool));
    let x = label;
    for (const [part, kind] of [['succeeded', 'ok'], ['errors', 'err'], ['refused', 'ref'], ['waiting', 'wait']]) {
      const w = (t[part] / most) * (width - label - 50);
      if (w > 0) {
        const bar = svg('rect', { x, y, width: w, height: row - 8, class: kind });
        bar.append(svg('title', {}, `${t.tool}: ${t[part]} ${part}`));
        chart.append(bar);
      }
      x += w;
    }
    chart.append(svg('text', { x: x + 4, y: y + 16, class: 'count' }, String(t.calls)));
  });
  if (!tools.length) chart.append(svg('text', { x: 8, y: 18 }, 'No calls yet.'));
  const ms = (v) => (v === null || v === undefined ? '>10000' : String(v));
  $('tools').tBodies[0].replaceChildren(...tools.map((t) => el('tr', {},
    el('th', { scope: 'row', text: t.tool }), el('td', { text: String(t.calls) }), el('td', { text: String(t.errors) }),
    el('td', { text: String(t.refused) }), el('td', { text: String(t.waiting) }),
    el('td', { text: t.calls ? ms(t.latency_ms.p50) : '' }), el('td', { text: t.calls ? ms(t.latency_ms.p95) : '' }),
    el('td', { text: String(t.latency_ms.mean) }))));
}

// Starting the statistics over forgets every count (of every replica, with the state on
// Redis): the button asks for a second click within five seconds.
let disarmReset = null;
function armReset(armed) {
  const button = $('reset-tools');
  clearTimeout(disarmReset);
  button.textContent = armed ? 'Click again to forget every count' : 'Start over';
  if (armed) {
    button.dataset.armed = 'yes';
    disarmReset = setTimeout(() => armReset(false), 5000);
  } else {
    delete button.dataset.armed;
  }
}
$('reset-tools').addEventListener('click', async () => {
  const button = $('reset-tools');
  if (!button.dataset.armed) {
    armReset(true);
    return;
  }
  armReset(false);
  button.disabled = true;
  try {
    await api('DELETE', '/v1/admin/stats');
    await load('tools');
    say('The statistics were started over.');
  } catch (error) {
    say(`The statistics were not started over: ${error.message}`, true);
  }
  button.disabled = false;
});

const LOADERS = { queue: loadQueue, history: loadHistory, pins: loadPins, tools: loadTools, mine: loadMine };

$('queue-more').addEventListener('click', async () => {
  try { await moreQueue(); } catch (error) { say(error.message, true); }
});
$('mine-more').addEventListener('click', async () => {
  try { await moreMine(); } catch (error) { say(error.message, true); }
});
$('history-more').addEventListener('click', () => {
  decided.window = Math.min(decided.window + PAGE, MOST_SHOWN);
  load('history');
});

// The queue refreshes itself while it is shown, keeping every card still waiting as it is.
setInterval(async () => {
  if (!session.me || !session.me.approver || $('view-queue').hidden) return;
  try {
    await loadQueue(false);
  } catch (error) {
    say(error.message, true);
  }
}, 5000);

// A session that is still open (a reloaded page) signs in by itself.
api('GET', '/console/session').then(signedIn, () => signedOut(''));
