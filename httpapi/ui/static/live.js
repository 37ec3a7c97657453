// delaybridge console: the live events page (#/live), registered in app.js's pages. It
// reads GET /v1/events with fetch (an EventSource cannot send the bearer token) and shows
// the latest events, newest first, with counts since the page opened. Every value is
// inserted as text. Leaving the page (another hash) ends the stream.
'use strict';

const liveKeep = 200; // rows kept on the page
let liveAbort = null; // the open stream's AbortController

function liveStop() {
  if (liveAbort) liveAbort.abort();
  liveAbort = null;
}
window.addEventListener('hashchange', () => { if (!location.hash.startsWith('#/live')) liveStop(); });

pages['/live'] = async function livePage() {
  liveStop();
  const p = params();
  const target = p.get('target') || '';
  const counts = {delivered: 0, dead_lettered: 0, expired: 0, changed: 0, missed: 0};
  const countEls = {};
  const card = (k, label) => {
    countEls[k] = el('p', {class: 'big', id: 'live-' + k}, '0');
    return el('div', {class: 'card'}, el('h3', {}, label), countEls[k]);
  };
  const state = el('p', {class: 'sub', id: 'live-state'}, 'connecting…');
  const body = el('tbody', {id: 'live-rows'});
  const pause = el('button', {type: 'button', id: 'live-pause'}, 'Pause');
  let paused = false;
  pause.addEventListener('click', () => {
    paused = !paused;
    pause.textContent = paused ? 'Resume' : 'Pause';
  });
  const f = el('form', {id: 'live-filter'},
    el('input', {name: 'target', value: target, placeholder: 'target glob, e.g. orders.* (all when empty)', maxlength: '256'}),
    el('button', {type: 'submit'}, 'Watch'), pause);
  f.addEventListener('submit', e => {
    e.preventDefault();
    const t = f.elements.target.value.trim();
    go('/live', t ? {target: t} : {});
  });
  view.replaceChildren(el('h2', {}, 'Live events'), f,
    el('div', {class: 'cards'}, card('delivered', 'Delivered'), card('dead_lettered', 'Dead-lettered'),
      card('expired', 'Expired'), card('changed', 'Changed by the API'), card('missed', 'Missed (too fast to show)')),
    state,
    el('table', {id: 'live-table'},
      el('thead', {}, el('tr', {}, el('th', {}, 'Time (UTC)'), el('th', {}, 'Event'), el('th', {}, 'Target'),
        el('th', {}, 'Id'), el('th', {}, 'Detail'))), body),
    el('p', {class: 'sub'}, 'Fleet-wide: every replica\'s deliveries, dead letters and expiries, and changes made through the API. ' +
      'At most ' + liveKeep + ' rows are kept; a reader that falls behind is told how many events it missed.'));

  const detail = e => {
    const parts = [];
    if (e.type === 'delivered' && e.due) parts.push('late ' + Math.max(0, e.at - e.due) + ' ms');
    if (e.attempts > 1 || (e.attempts && e.type !== 'delivered')) parts.push('attempts ' + e.attempts);
    if (e.reason) parts.push(e.reason);
    if (e.type === 'changed' && e.count > 1) parts.push(e.count + ' messages');
    if (e.type === 'missed') parts.push(e.count + ' events missed');
    return parts.join(', ');
  };
  const show = e => {
    if (e.type in counts) {
      counts[e.type] += e.type === 'missed' ? e.count : 1;
      countEls[e.type].textContent = num(counts[e.type]);
    }
    if (paused) return;
    const kind = e.type === 'changed' ? 'changed: ' + e.op : e.type.replace('_', '-');
    const idCell = e.id ? el('td', {class: 'live-id'}, el('a', {href: '#/message/' + encodeURIComponent(e.id)}, e.id)) : el('td', {}, '-');
    body.prepend(el('tr', {class: 'live-' + e.type}, el('td', {}, fmtTime(e.at)), el('td', {}, kind),
      el('td', {}, e.target || '-'), idCell, el('td', {}, detail(e))));
    while (body.rows.length > liveKeep) body.deleteRow(body.rows.length - 1);
  };

  const ctl = new AbortController();
  liveAbort = ctl;
  const headers = {Accept: 'text/event-stream'};
  const token = sessionStorage.getItem('dbToken');
  if (token) headers.Authorization = 'Bearer ' + token;
  const resp = await fetch('/v1/events' + (target ? '?target=' + encodeURIComponent(target) : ''), {headers, signal: ctl.signal});
  if (resp.status === 401) {
    showError('The API wants a token: enter the bridge\'s BRIDGE_API_TOKEN above (the CLI takes it as --token).');
    return;
  }
  if (!resp.ok) {
    let msg = resp.status + ' ' + resp.statusText;
    try { msg = (await resp.json()).error || msg; } catch (_) { /* not JSON */ }
    throw new Error(msg);
  }
  state.textContent = 'watching' + (target ? ' targets matching ' + target : ' every target') + ' since ' + fmtTime(Date.now());
  (async () => {
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    try {
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buf += dec.decode(value, {stream: true});
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (line.startsWith('data: ')) {
            try { show(JSON.parse(line.slice(6))); } catch (_) { /* a line that is not an event */ }
          }
        }
      }
      if (liveAbort === ctl) state.textContent = 'the bridge ended the stream (shutting down?): reload to watch again';
    } catch (e) {
      if (liveAbort === ctl) state.textContent = 'stream ended: ' + e.message;
    }
  })();
};
