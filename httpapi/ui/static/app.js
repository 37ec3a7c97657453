// delaybridge console: plain DOM code over the message API. Every value from the API is
// inserted as text (never as HTML). The token is kept in this tab's sessionStorage.
'use strict';

const view = document.getElementById('view');
const errBox = document.getElementById('error');
let refresh = null; // the overview's timer
let lastOverview = null; // {t, in, out} of the previous overview poll, for rates
const pages = {}; // path -> async render function, added by the pages' own scripts

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const k of kids.flat()) {
    if (k === null || k === undefined) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function showError(msg) {
  errBox.textContent = msg;
  errBox.hidden = !msg;
}

async function api(method, path, body) {
  const headers = {};
  const token = sessionStorage.getItem('dbToken');
  if (token) headers.Authorization = 'Bearer ' + token;
  const actor = sessionStorage.getItem('dbActor'); // the audit log's actor (audit.js)
  if (actor) headers['X-Delay-Actor'] = actor;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = {error: text}; }
  if (resp.status === 401) {
    showError('The API wants a token: enter the bridge\'s BRIDGE_API_TOKEN above (the CLI takes it as --token).');
    throw new Error('unauthorized');
  }
  if (!resp.ok) throw new Error((data && data.error) || resp.status + ' ' + resp.statusText);
  return data;
}

const fmtTime = ms => ms === null || ms === undefined ? '-' : new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
function fmtIn(ms) {
  if (ms === null || ms === undefined) return '-';
  let s = Math.round((ms - Date.now()) / 1000);
  const sign = s < 0 ? '-' : '';
  s = Math.abs(s);
  const h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60);
  return sign + (h ? h + 'h' : '') + (h || m ? m + 'm' : '') + (s % 60) + 's';
}
// fmtSpan is a span of milliseconds (a spread window): 1h, 10m, 2m30s, 1.5s, 250ms.
function fmtSpan(ms) {
  if (ms < 1000) return ms + 'ms';
  if (ms % 1000) return (ms / 1000) + 's';
  let s = ms / 1000;
  const h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60);
  s %= 60;
  return (h ? h + 'h' : '') + (m ? m + 'm' : '') + (s ? s + 's' : '');
}
const num = n => n === null || n === undefined ? '-' : Number(n).toLocaleString('en-US', {maximumFractionDigits: 1});

function params() {
  const i = location.hash.indexOf('?');
  return new URLSearchParams(i < 0 ? '' : location.hash.slice(i + 1));
}

// later runs f after ms unless the operator went to another page meanwhile (a delayed
// refresh or return must not take them away from where they went).
function later(ms, f) {
  const from = location.hash;
  setTimeout(() => { if (location.hash === from) f(); }, ms);
}

function go(path, p) {
  const q = p && p.toString();
  location.hash = path + (q ? '?' + q : '');
}

// --- overview -------------------------------------------------------------------------

function chart(id, title, fc, label) {
  const w = 720, h = 140, max = Math.max(1, ...fc.counts);
  const bw = w / fc.counts.length;
  const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
  svg.setAttribute('viewBox', `0 0 ${w} ${h + 18}`);
  svg.setAttribute('id', id);
  svg.setAttribute('class', 'chart');
  fc.counts.forEach((c, i) => {
    const r = document.createElementNS(svg.namespaceURI, 'rect');
    const bh = Math.round(c / max * h);
    r.setAttribute('x', (i * bw + 1).toFixed(1));
    r.setAttribute('y', h - bh);
    r.setAttribute('width', Math.max(bw - 2, 1).toFixed(1));
    r.setAttribute('height', bh);
    const t = document.createElementNS(svg.namespaceURI, 'title');
    t.textContent = `${label(i)}: ${c}`;
    r.append(t);
    svg.append(r);
  });
  [0, Math.floor(fc.counts.length / 2), fc.counts.length - 1].forEach(i => {
    const t = document.createElementNS(svg.namespaceURI, 'text');
    t.setAttribute('x', Math.min(i * bw, w - 60));
    t.setAttribute('y', h + 14);
    t.textContent = label(i);
    svg.append(t);
  });
  return el('section', {class: 'card wide'}, el('h3', {}, title, ` (peak ${num(max)}, overdue ${num(fc.overdue)})`), svg);
}

async function overview() {
  const from = location.hash;
  const scope = overviewScope();
  const [stats, targets, ov, hour, day] = await Promise.all([
    api('GET', '/v1/stats'), api('GET', '/v1/targets'), api('GET', '/v1/overview?scope=' + scope),
    api('GET', '/v1/forecast?step=60000&buckets=60'), api('GET', '/v1/forecast?step=3600000&buckets=24'),
  ]);
  const card = (id, title, value, sub) => el('section', {class: 'card', id}, el('h3', {}, title), el('p', {class: 'big'}, value), el('p', {class: 'sub'}, sub || ''));
  const quotas = new Map((targets.quotas || []).map(q => [q.pattern, q]));
  const rows = targets.targets.map(t => el('tr', {},
    el('td', {}, el('a', {href: '#/messages?target=' + encodeURIComponent(t.target), class: 'target-link'}, t.target)),
    el('td', {class: 'n'}, num(t.parked)), el('td', {}, t.next_due === null ? 'unknown' : fmtTime(t.next_due)), el('td', {}, fmtIn(t.next_due)),
    el('td', {class: 'window'}, t.window ? fmtSpan(t.window) : '-'), quotaCell(t.quota, quotas.get(t.quota)), pauseCell(t, targets.paused || [])));
  const fleet = scope === 'fleet';
  if (fleet) lastOverview = null;
  if (location.hash !== from) return; // a refresh that ended after the operator went elsewhere
  view.replaceChildren(scopeToggle(scope),
    el('div', {class: 'cards'},
      card('parked-total', 'Parked', num(stats.parked), 'next due ' + fmtTime(stats.next_due)),
      fleet ? fleetCards(ov, card) : replicaCards(ov, card),
      card('redis', 'Redis', ov.redis === 'ok' ? 'ok' : 'attention', ov.redis)),
    ...(fleet ? fleetCharts(ov) : []),
    chart('forecast-hour', 'Due in the next hour, by minute', hour, i => '+' + i + 'm'),
    chart('forecast-day', 'Due in the next day, by hour', day, i => '+' + i + 'h'),
    el('section', {class: 'card wide'}, el('h3', {}, 'Targets',
      el('span', {class: 'sub', id: 'held-by-order', title: 'parked messages, of all targets, that wait for the message before them with their ordering key (x-delay-ordering-key) to leave; each is counted in its target\'s parked too'},
        ' (' + num(targets.held_by_order || 0) + ' held by order)')),
      el('table', {id: 'targets'}, el('thead', {}, el('tr', {}, el('th', {}, 'target'), el('th', {}, 'parked'), el('th', {}, 'next due (UTC)'), el('th', {}, 'in'),
        el('th', {title: 'the spread window (x-delay-window) of the next message only'}, 'window'), el('th', {}, 'quota (pattern: parked/limit)'),
        el('th', {title: 'a paused target is not published (fleet-wide); its messages stay parked'}, 'delivery'))),
        el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', {colspan: 7}, 'nothing parked'))))),
    pausedList(targets.paused || []),
    quotaTable(targets.quotas || []));
}

// replicaCards are the cards of this replica's own counters (GET /v1/overview).
function replicaCards(ov, card) {
  const now = Date.now();
  const sum = o => Object.values(o || {}).reduce((a, b) => a + b, 0);
  // The first load has only the counts since the replica started: their average rate;
  // later polls show the rate since the previous one.
  let last = lastOverview, over = 'since start (average)';
  if (!last) last = {t: Math.min(ov.since || now, now - 1000), in: 0, out: 0};
  else over = 'over the last ' + Math.round((now - last.t) / 1000) + ' s';
  const dt = Math.max((now - last.t) / 1000, 1);
  const inRate = num(((ov.in.parked || 0) - last.in) / dt) + '/s';
  const outRate = num(((ov.out.published || 0) - last.out) / dt) + '/s';
  lastOverview = {t: now, in: ov.in.parked || 0, out: ov.out.published || 0};
  return [
    card('rate-in', 'In (parked)', inRate, over + '; ' + num(ov.in.parked || 0) + ' since start; ' + num(sum(ov.in) - (ov.in.parked || 0)) + ' not parked'),
    card('rate-out', 'Out (published)', outRate, over + '; ' + num(ov.out.published || 0) + ' since start; ' + num(ov.dead_lettered || 0) + ' dead-lettered (every reason, in and out)'),
    card('lateness', 'Lateness p50 / p99', ov.lateness_p50_ms === null ? '-' : num(ov.lateness_p50_ms) + ' / ' + num(ov.lateness_p99_ms) + ' ms',
      num(ov.delivered) + ' deliveries by this replica' + (ov.lateness_max_ms === null ? '' : '; slowest ' + num(ov.lateness_max_ms) + ' ms')),
  ];
}

// quotaCell is a target's quota on the targets table: the BRIDGE_TARGET_QUOTA pattern it
// counts against and that pattern's use (all its targets), "-" for none.
function quotaCell(pattern, q) {
  if (!pattern) return el('td', {class: 'quota'}, '-');
  const used = q && q.limit > 0 ? q.parked / q.limit : null;
  const use = !q ? '' : ' ' + num(q.parked) + '/' + (q.limit > 0 ? num(q.limit) : '-') + (used === null ? '' : ' (' + (100 * used).toFixed(1) + '%)');
  return el('td', {class: 'quota' + (used !== null && used >= 0.9 ? ' warn' : '')}, pattern + use);
}

// quotaTable is the use of every BRIDGE_TARGET_QUOTA pattern (GET /v1/targets "quotas"),
// or nothing when none is configured.
function quotaTable(quotas) {
  if (!quotas.length) return '';
  const rows = quotas.map(q => {
    const used = q.limit > 0 ? q.parked / q.limit : null;
    return el('tr', {class: used !== null && used >= 0.9 ? 'warn' : ''},
      el('td', {}, q.pattern), el('td', {class: 'n'}, num(q.parked)),
      el('td', {class: 'n'}, q.limit > 0 ? num(q.limit) : '-'),
      el('td', {class: 'n'}, used === null ? '-' : (100 * used).toFixed(1) + '%'),
      el('td', {class: 'n'}, num(q.rejected)));
  });
  return el('section', {class: 'card wide'}, el('h3', {}, 'Quotas (BRIDGE_TARGET_QUOTA)'),
    el('table', {id: 'quotas'}, el('thead', {}, el('tr', {}, el('th', {}, 'pattern'), el('th', {}, 'parked'), el('th', {}, 'limit'),
      el('th', {}, 'used'), el('th', {title: 'since this replica started; the fleet\'s refusals of the last hour are on the overview of the fleet'}, 'rejected by this replica'))), el('tbody', {}, rows)));
}

// --- messages -------------------------------------------------------------------------

function toMs(v) {
  if (!v) return '';
  if (/^\d+$/.test(v)) return v;
  const t = Date.parse(v.endsWith('Z') || /[+-]\d\d:\d\d$/.test(v) ? v : v + 'Z');
  return isNaN(t) ? v : String(t);
}

// msgHref is the console's link to message id of ordering key key (none: a message
// without key): a keyed message is named by both.
const msgHref = (id, key) => '#/message/' + encodeURIComponent(id) + (key ? '?ordering_key=' + encodeURIComponent(key) : '');

// heldBy is "held by <link to the message before it with its key>" for a held message.
const heldBy = m => m.held_by ? [' (held by ', el('a', {href: msgHref(m.held_by, m.ordering_key), class: 'held-by'}, m.held_by), ')'] : null;

// msgTrail is the pages reached in this tab for one selector, for "Previous page" and the
// position shown: cursors[i] is page i's cursor ('' the first; a cursor is valid only for
// its selector, sel) and before[i] how many messages the pages before it showed (a page
// may be short: its reading time ran out). The page's number travels in the hash (page=i)
// and is trusted only when the trail holds the cursor shown there.
let msgTrail = {sel: '', cursors: [''], before: [0]};

// MAX_ID is the longest id (x-delay-id, bytes): a longer search is refused before asking.
const MAX_ID = 256;

// findForm is the search by id (and, for a keyed message, its ordering key): a found
// message opens in the message view; otherwise the reason shows beside the form.
function findForm() {
  const out = el('span', {id: 'find-result', class: 'result'});
  const f = el('form', {id: 'find', onsubmit: async e => {
    e.preventDefault();
    const id = f.elements.id.value, key = f.elements.ordering_key.value;
    out.textContent = '';
    if (!id) return;
    if (new TextEncoder().encode(id).length > MAX_ID || new TextEncoder().encode(key).length > MAX_ID) {
      out.textContent = 'An id and an ordering key are at most ' + MAX_ID + ' bytes.';
      return;
    }
    try {
      await api('GET', '/v1/messages/' + encodeURIComponent(id) + (key ? '?ordering_key=' + encodeURIComponent(key) : ''));
      location.hash = msgHref(id, key);
    } catch (err) {
      out.textContent = JSON.stringify(id) + (key ? ' with key ' + JSON.stringify(key) : '') + ': ' + err.message;
    }
  }}, el('input', {name: 'id', id: 'find-id', placeholder: 'find by id (x-delay-id, exact)', autocomplete: 'off'}),
  el('input', {name: 'ordering_key', id: 'find-key', placeholder: 'ordering key, if it has one', autocomplete: 'off'}),
  el('button', {type: 'submit', id: 'find-go'}, 'Find'), out);
  return f;
}

async function messages() {
  const p = params();
  const q = new URLSearchParams();
  for (const k of ['target', 'due_from', 'due_to', 'cursor']) if (p.get(k)) q.set(k, k.startsWith('due') ? toMs(p.get(k)) : p.get(k));
  const limit = Number(p.get('limit')) || 50;
  q.set('limit', String(limit));
  const res = await api('GET', '/v1/messages?' + q.toString());
  const sel = ['target', 'due_from', 'due_to'].map(k => p.get(k) || '').join('\n');
  const cursor = p.get('cursor') || '';
  const n = cursor ? Math.max(0, Math.min(Number(p.get('page')) || 0, 1e6)) : 0;
  if (msgTrail.sel !== sel || !cursor) msgTrail = {sel, cursors: [''], before: [0]};
  const known = n > 0 && msgTrail.cursors[n] === cursor; // reached from the first page here
  if (!known && cursor) msgTrail = {sel, cursors: [], before: []};
  const at = cursor && !known ? null : msgTrail.before[n]; // messages before this page
  const input = (name, ph) => el('input', {name, id: 'f-' + name, placeholder: ph, value: p.get(name) || ''});
  const form = el('form', {id: 'filter', onsubmit: e => {
    e.preventDefault();
    const n = new URLSearchParams();
    for (const k of ['target', 'due_from', 'due_to']) { const v = form.elements[k].value.trim(); if (v) n.set(k, v); }
    go('/messages', n);
  }}, input('target', 'target glob: orders.* or kafka:billing.*'), input('due_from', 'due from (UTC, 2026-11-25T18:00 or ms)'),
  input('due_to', 'due to'), el('button', {type: 'submit', id: 'f-apply'}, 'Filter'));
  const rows = res.messages.map(m => el('tr', {},
    el('td', {}, el('a', {href: msgHref(m.id, m.ordering_key), class: 'msg-link'}, m.id),
      m.ordering_key ? el('span', {class: 'okey'}, ' key ', el('code', {}, m.ordering_key)) : null,
      m.every ? el('span', {class: 'every', title: 'recurring (x-delay-every): parked again after each firing'}, '↻ ' + m.every) : null), el('td', {}, m.target),
    el('td', {}, fmtTime(m.due) + (m.window ? ' (drawn in ' + fmtSpan(m.window) + ')' : '') +
      (m.max_wait ? ' (max wait ' + fmtSpan(m.max_wait) + ': by ' + fmtTime(m.due_by) + ')' : ''), heldBy(m)), el('td', {}, fmtIn(m.due)),
    el('td', {class: 'n'}, m.attempts + (m.scheduled !== m.due ? ' (next ' + fmtTime(m.scheduled) + ')' : '')), el('td', {class: 'n'}, num(m.size))));
  const goPage = (i, c) => () => {
    const q2 = new URLSearchParams(p);
    if (c) { q2.set('cursor', c); q2.set('page', String(i)); } else { q2.delete('cursor'); q2.delete('page'); }
    if (at !== null) {
      msgTrail.cursors[i] = c;
      if (i > n) msgTrail.before[i] = at + res.messages.length;
    }
    go('/messages', q2);
  };
  const prev = known ? el('button', {id: 'prev-page', onclick: goPage(n - 1, msgTrail.cursors[n - 1])}, 'Previous page') : null;
  const more = res.next_cursor ? el('button', {id: 'next-page', onclick: goPage(n + 1, res.next_cursor)}, 'Next page') : null;
  const first = cursor ? el('button', {id: 'first-page', onclick: goPage(0, '')}, 'First page') : null;
  const shown = res.messages.length ? (at === null ? res.messages.length + ' shown' : 'messages ' + num(at + 1) + '–' + num(at + res.messages.length)) : 'none shown';
  const total = el('p', {id: 'msg-total'}, shown + ' of ', el('strong', {}, (res.total_estimated ? 'about ' : '') + num(res.total)),
    res.total_estimated ? ' (estimate: counting a target and a due range of this size exactly would read more than a page)' : ' matching', '.');
  view.replaceChildren(findForm(), form, total,
    el('table', {id: 'messages'}, el('thead', {}, el('tr', {}, ['id', 'target', 'due (UTC)', 'in', 'attempts', 'size'].map(h => el('th', {}, h)))),
      el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', {colspan: 6}, res.next_cursor ? 'none on this page yet: go on' : 'no parked message matches')))),
    el('p', {class: 'pager'}, first, ' ', prev, ' ', more));
}

// --- one message ----------------------------------------------------------------------

const PREVIEW = 4096;

function preview(b64) {
  let bytes;
  try { bytes = Uint8Array.from(atob(b64 || ''), c => c.charCodeAt(0)); } catch (_) { return '(not base64)'; }
  const shown = bytes.slice(0, PREVIEW);
  let text;
  try { text = new TextDecoder('utf-8', {fatal: true}).decode(shown); } catch (_) {
    text = Array.from(shown, b => b.toString(16).padStart(2, '0')).join(' ');
  }
  return text + (bytes.length > PREVIEW ? `\n… (${bytes.length} bytes, first ${PREVIEW} shown)` : '');
}

async function message(id) {
  const key = params().get('ordering_key') || '';
  const path = '/v1/messages/' + encodeURIComponent(id) + (key ? '?ordering_key=' + encodeURIComponent(key) : '');
  let m;
  try {
    m = await api('GET', path);
  } catch (e) {
    view.replaceChildren(el('p', {id: 'gone'}, 'No parked message ', el('code', {}, id), ': ' + e.message), el('a', {href: '#/messages'}, 'Back to the list'));
    return;
  }
  const out = el('p', {id: 'action-result', class: 'result'});
  const act = async (what, op, body) => {
    try {
      const r = await api('POST', '/v1/bulk/' + op, Object.assign(key ? {id, ordering_key: key} : {id}, body));
      out.textContent = `${what}: matched ${r.matched}, changed ${r.changed}` + (r.matched && !r.changed ? ' (it is being delivered: left alone)' : '');
      if (r.changed) later(600, route);
    } catch (e) { out.textContent = what + ' failed: ' + e.message; }
  };
  const confirmBox = el('span', {id: 'cancel-confirm', hidden: ''}, 'Cancel this message for good? ',
    el('button', {id: 'cancel-yes', class: 'danger', onclick: async () => {
      try {
        await api('DELETE', path);
        out.textContent = 'cancelled';
        later(600, () => go('/messages'));
      } catch (e) { out.textContent = 'cancel failed: ' + e.message; }
    }}, 'Yes, cancel'));
  const shift = el('input', {id: 'shift', placeholder: '+1h or -30m', size: 10});
  const at = el('input', {id: 'deliver-at', placeholder: 'UTC 2026-11-25T18:00 or ms', size: 26});
  const hdrs = Object.entries(m.headers || {}).sort().map(([k, v]) => el('tr', {}, el('td', {}, k), el('td', {}, v)));
  view.replaceChildren(
    el('h2', {}, 'Message ', el('code', {id: 'msg-id'}, m.id)),
    el('table', {id: 'detail'}, el('tbody', {},
      [['target', m.target], ['due (UTC)', fmtTime(m.due) + ' (in ' + fmtIn(m.due) + ')'], ['source', m.source], ['attempts', m.attempts],
        ['expires', m.expires ? m.expires + ' ms after due' : '-'], ['every', m.every || '-'], ['misfire', m.misfire || '-'],
        ['window', m.window ? fmtSpan(m.window) + ' (due is the time drawn in it' + (m.every ? '; each firing draws its own)' : ')') : '-'],
        ['max wait', m.max_wait ? fmtSpan(m.max_wait) + ' (due by ' + fmtTime(m.due_by) + ' UTC at the latest, however often it is replaced)' : '-'],
        ['ordering key', m.ordering_key ? el('code', {id: 'okey'}, m.ordering_key) : '-'],
        ['held by', m.held_by ? [el('a', {href: msgHref(m.held_by, m.ordering_key), id: 'held-by'}, m.held_by),
          ' (published once that message, the one before it with its key, has left the store)'] : '-']].map(([k, v]) => el('tr', {}, el('th', {}, k), el('td', {}, v))))),
    el('h3', {}, 'Headers'), el('table', {id: 'headers'}, el('tbody', {}, hdrs.length ? hdrs : el('tr', {}, el('td', {}, 'none')))),
    el('h3', {}, 'Payload'), el('pre', {id: 'payload'}, preview(m.payload_base64)),
    el('h3', {}, 'Actions'),
    el('p', {class: 'actions'},
      el('button', {id: 'deliver-now', onclick: () => act('deliver now', 'deliver-now', {})}, 'Deliver now'), ' ',
      shift, el('button', {id: 'shift-go', onclick: () => act('reschedule', 'reschedule', {shift: shift.value.trim()})}, 'Shift'), ' ',
      at, el('button', {id: 'at-go', onclick: () => act('reschedule', 'reschedule', {deliver_at: toMs(at.value.trim())})}, 'Deliver at'), ' ',
      el('button', {id: 'cancel', class: 'danger', onclick: () => { confirmBox.hidden = false; }}, 'Cancel…'), ' ', confirmBox),
    out);
}

// --- bulk changes ---------------------------------------------------------------------

function bulk() {
  const f = el('form', {id: 'bulk-form', onsubmit: e => e.preventDefault()},
    el('label', {}, 'target glob ', el('input', {name: 'target', id: 'b-target', placeholder: 'billing.*'})),
    el('label', {}, 'due from ', el('input', {name: 'due_from', id: 'b-from', placeholder: 'UTC or ms'})),
    el('label', {}, 'due to ', el('input', {name: 'due_to', id: 'b-to', placeholder: 'UTC or ms'})),
    el('label', {}, 'operation ', el('select', {name: 'op', id: 'b-op'},
      el('option', {value: 'reschedule'}, 'reschedule'), el('option', {value: 'deliver-now'}, 'deliver now'), el('option', {value: 'cancel'}, 'cancel'))),
    el('label', {}, 'shift ', el('input', {name: 'shift', id: 'b-shift', placeholder: '+1h'})),
    el('label', {}, 'or deliver at ', el('input', {name: 'deliver_at', id: 'b-at', placeholder: 'UTC or ms'})));
  const out = el('p', {id: 'bulk-result', class: 'result'});
  const confirmBtn = el('button', {id: 'bulk-confirm', class: 'danger', hidden: ''});
  const request = () => {
    const r = {};
    const v = k => f.elements[k].value.trim();
    if (v('target')) r.target = v('target');
    if (v('due_from')) r.due_from = toMs(v('due_from'));
    if (v('due_to')) r.due_to = toMs(v('due_to'));
    if (f.elements.op.value === 'reschedule') {
      if (v('shift')) r.shift = v('shift');
      if (v('deliver_at')) r.deliver_at = toMs(v('deliver_at'));
    }
    return r;
  };
  const run = async (dry) => {
    const op = f.elements.op.value;
    const total = {matched: 0, changed: 0};
    let req = Object.assign(request(), {dry_run: dry});
    for (;;) {
      const r = await api('POST', '/v1/bulk/' + op, req);
      total.matched += r.matched;
      total.changed += r.changed;
      if (!r.next_cursor) return total;
      req = Object.assign({}, req, {cursor: r.next_cursor});
    }
  };
  const dryBtn = el('button', {id: 'bulk-dry', onclick: async () => {
    confirmBtn.hidden = true;
    try {
      const t = await run(true);
      out.textContent = `dry run: ${t.matched} messages match`;
      if (t.matched > 0) {
        confirmBtn.textContent = `Confirm: ${f.elements.op.value} ${t.matched} messages`;
        confirmBtn.hidden = false;
      }
    } catch (e) { out.textContent = 'dry run failed: ' + e.message; }
  }}, 'Dry run');
  confirmBtn.addEventListener('click', async () => {
    confirmBtn.hidden = true;
    try {
      const t = await run(false);
      out.textContent = `done: matched ${t.matched}, changed ${t.changed}` + (t.matched > t.changed ? ' (those in delivery are left alone)' : '');
    } catch (e) { out.textContent = 'failed: ' + e.message; }
  });
  f.addEventListener('input', () => { confirmBtn.hidden = true; out.textContent = ''; });
  view.replaceChildren(el('h2', {}, 'Bulk change'), f, el('p', {}, dryBtn, ' ', confirmBtn), out,
    el('p', {class: 'sub'}, 'A dry run counts what the selector matches; nothing changes until you confirm. Messages being delivered are never changed.'));
}

// --- routing --------------------------------------------------------------------------

async function route() {
  clearInterval(refresh);
  showError('');
  const h = location.hash.replace(/^#/, '') || '/';
  const path = h.split('?')[0];
  try {
    if (path === '/') {
      await overview();
      refresh = setInterval(() => overview().catch(e => showError(e.message)), 5000);
    } else if (path === '/messages') {
      await messages();
    } else if (path.startsWith('/message/')) {
      await message(decodeURIComponent(path.slice('/message/'.length)));
    } else if (path === '/bulk') {
      bulk();
    } else if (pages[path]) {
      await pages[path]();
    } else {
      view.replaceChildren(el('p', {}, 'No such page.'));
    }
  } catch (e) {
    if (e.message !== 'unauthorized') showError(e.message);
  }
}

document.getElementById('token-form').addEventListener('submit', e => {
  e.preventDefault();
  const t = document.getElementById('token').value;
  if (t) sessionStorage.setItem('dbToken', t); else sessionStorage.removeItem('dbToken');
  document.getElementById('token').value = '';
  route();
});
window.addEventListener('hashchange', route);
document.addEventListener('DOMContentLoaded', route); // after the pages' scripts (deferred) ran
