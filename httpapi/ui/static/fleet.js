// delaybridge console: the fleet-wide view of the overview (GET /v1/overview?scope=fleet,
// docs/design.md "Fleet-wide view"): the scope toggle, the fleet's cards of the last hour and
// its charts of the last hour by minute and the last 7 days by hour (inline SVG). Loaded
// before app.js, whose helpers (el, num) it uses when called. Every value is inserted as text.
'use strict';

// overviewScope is the overview's scope from the route: the fleet unless ?scope=replica.
function overviewScope() {
  const i = location.hash.indexOf('?');
  return new URLSearchParams(i < 0 ? '' : location.hash.slice(i + 1)).get('scope') === 'replica' ? 'replica' : 'fleet';
}

// scopeToggle switches the overview between the fleet and the replica serving the page.
function scopeToggle(scope) {
  const link = (s, href, label) => el('a', {href, id: 'scope-' + s, class: scope === s ? 'on' : null, 'aria-current': scope === s ? 'page' : null}, label);
  return el('p', {class: 'scope', id: 'scope'}, 'Showing ', link('fleet', '#/', 'the fleet'), ' ',
    link('replica', '#/?scope=replica', 'this replica'));
}

const total = o => Object.values(o || {}).reduce((a, b) => a + b, 0);

// fleetCards are the fleet's cards of the last hour; card(id, title, value, sub) makes one.
function fleetCards(ov, card) {
  const h = ov.last_hour.total;
  const parked = h.in.parked || 0, published = h.out.published || 0;
  const recent = k => ov.last_hour.series.slice(-5).reduce((a, c) => a + (k === 'in' ? c.in.parked || 0 : c.out.published || 0), 0);
  const reasons = Object.entries(h.dead_lettered).sort((a, b) => b[1] - a[1]).map(([r, n]) => r + ' ' + num(n)).join(', ');
  return [
    card('fleet-replicas', 'Replicas', num(ov.replicas), 'live now; each adds its counts every few seconds'),
    card('fleet-in', 'In (parked), last hour', num(parked), num(recent('in')) + ' in the last 5 minutes; ' + num(total(h.in) - parked) + ' not parked'),
    card('fleet-out', 'Out (published), last hour', num(published), num(recent('out')) + ' in the last 5 minutes; ' + num(total(h.out) - published) + ' other results'),
    card('fleet-dead', 'Dead-lettered, last hour', num(total(h.dead_lettered)), reasons || 'none'),
    quotaCard(h.quota_rejected || {}, card),
    card('fleet-lateness', 'Lateness p50 / p99, last hour', h.lateness_p50_ms === null ? '-' : num(h.lateness_p50_ms) + ' / ' + num(h.lateness_p99_ms) + ' ms',
      num(h.delivered) + ' deliveries by the fleet'),
  ];
}

// quotaCard is the fleet's quota refusals of the last hour: dead-lettered quota_exceeded by
// the brokers, and the message API's 429s (never dead letters, so not in the card beside).
function quotaCard(q, card) {
  const api = q.http || 0, dead = total(q) - api;
  return card('fleet-quota', 'Quota refusals, last hour', num(dead + api), `dead-lettered ${num(dead)}, API 429 ${num(api)}`);
}

// historyChart draws a window of the fleet's counts: parked (in) and published (out) as
// lines, dead letters as bars.
function historyChart(id, title, win, label) {
  const ns = 'http://www.w3.org/2000/svg', w = 720, h = 140;
  const s = win.series, n = s.length, bw = w / n;
  const val = (c, k) => k === 'dead' ? total(c.dead_lettered) : k === 'in' ? (c.in.parked || 0) : (c.out.published || 0);
  const max = Math.max(1, ...s.map(c => Math.max(val(c, 'in'), val(c, 'out'), val(c, 'dead'))));
  const y = v => (h - v / max * h).toFixed(1);
  const svg = document.createElementNS(ns, 'svg');
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
    return e;
  };
  svg.setAttribute('viewBox', `0 0 ${w} ${h + 18}`);
  svg.setAttribute('id', id);
  svg.setAttribute('class', 'chart history');
  s.forEach((c, i) => {
    const d = val(c, 'dead');
    if (d > 0) add('rect', {class: 'dead', x: (i * bw).toFixed(1), y: y(d), width: Math.max(bw - 1, 1).toFixed(1), height: (d / max * h).toFixed(1)});
  });
  for (const k of ['in', 'out']) {
    add('polyline', {class: k, points: s.map((c, i) => `${(i * bw + bw / 2).toFixed(1)},${y(val(c, k))}`).join(' ')});
  }
  s.forEach((c, i) => { // a transparent column per bucket, for its tooltip
    const r = add('rect', {class: 'hit', x: (i * bw).toFixed(1), y: 0, width: bw.toFixed(1), height: h});
    const t = document.createElementNS(ns, 'title');
    t.textContent = `${label(c.at)}: in ${val(c, 'in')}, out ${val(c, 'out')}, dead-lettered ${val(c, 'dead')}` +
      (c.lateness_p99_ms === null ? '' : `, lateness p99 ${num(c.lateness_p99_ms)} ms`);
    r.append(t);
  });
  [0, Math.floor(n / 2), n - 1].forEach(i => add('text', {x: Math.min(i * bw, w - 90), y: h + 14}, label(s[i].at)));
  const t = win.total;
  return el('section', {class: 'card wide'},
    el('h3', {id: id + '-title'}, title, ` (in ${num(t.in.parked || 0)}, out ${num(t.out.published || 0)}, dead-lettered ${num(total(t.dead_lettered))}; peak ${num(max)})`),
    svg,
    el('p', {class: 'legend'}, el('span', {class: 'key in'}, 'in (parked)'), ' ', el('span', {class: 'key out'}, 'out (published)'), ' ',
      el('span', {class: 'key dead'}, 'dead-lettered')));
}

// fleetCharts are the fleet's charts of the last hour and of the last 7 days.
function fleetCharts(ov) {
  const hm = at => new Date(at).toISOString().slice(11, 16);
  const dh = at => new Date(at).toISOString().slice(5, 13).replace('T', ' ') + 'h';
  return [
    historyChart('fleet-hour', 'Fleet, last hour by minute (UTC)', ov.last_hour, hm),
    historyChart('fleet-week', 'Fleet, last 7 days by hour (UTC)', ov.last_7d, dh),
  ];
}
