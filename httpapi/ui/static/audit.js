// delaybridge console: the audit log page (#/audit), registered in app.js's pages for its
// router (so it loads after app.js). It uses app.js's helpers (el, api, fmtTime, num, params,
// go, view). Every value is inserted as text.
'use strict';

pages['/audit'] = async function auditPage() {
  const p = params();
  const q = new URLSearchParams({limit: p.get('limit') || '50'});
  for (const k of ['cursor', 'actor', 'op', 'state']) if (p.get(k)) q.set(k, p.get(k));
  const res = await api('GET', '/v1/audit?' + q.toString());
  const out = el('p', {id: 'audit-result', class: 'result'});
  const what = e => {
    const parts = [];
    if (e.id) parts.push('id ' + e.id);
    if (e.selector) parts.push(Object.entries(e.selector).map(([k, v]) => k + '=' + (k.startsWith('due') ? fmtTime(v) : v)).join(' '));
    if (e.shift) parts.push('shift ' + e.shift);
    if (e.deliver_at) parts.push('deliver at ' + fmtTime(e.deliver_at));
    return parts.join('; ') || '-';
  };
  const resume = async (e, btn) => {
    btn.disabled = true;
    const total = {matched: 0, changed: 0};
    try {
      for (;;) {
        const r = await api('POST', '/v1/bulk/resume', {op_id: e.op_id});
        total.matched += r.matched;
        total.changed += r.changed;
        if (!r.next_cursor) break;
      }
      out.textContent = `resumed ${e.op_id}: matched ${total.matched}, changed ${total.changed} more`;
      later(600, route);
    } catch (err) {
      out.textContent = 'resume failed: ' + err.message;
      btn.disabled = false;
    }
  };
  const rows = res.entries.map(e => {
    const state = el('td', {class: 'state-' + e.state}, e.state);
    if (e.state === 'interrupted' && e.resumable) {
      const btn = el('button', {class: 'resume', 'data-op': e.op_id}, 'Resume');
      btn.addEventListener('click', () => resume(e, btn));
      state.append(' ', btn);
    }
    return el('tr', {'data-op': e.op_id},
      el('td', {}, fmtTime(e.at)), el('td', {}, e.op), el('td', {}, what(e)), el('td', {}, e.dry_run ? 'dry run' : ''),
      el('td', {class: 'n'}, num(e.matched)), el('td', {class: 'n'}, num(e.changed)), state,
      el('td', {}, e.actor || '-'), el('td', {}, e.remote || '-'), el('td', {}, el('code', {}, e.op_id)));
  });
  let more = null;
  if (res.next_cursor) {
    const n = new URLSearchParams(p);
    n.set('cursor', res.next_cursor);
    more = el('button', {id: 'audit-older', onclick: () => go('/audit', n)}, 'Older');
  }
  const actor = el('input', {id: 'actor', placeholder: 'your name', value: sessionStorage.getItem('dbActor') || '', size: 16});
  const actorForm = el('form', {id: 'actor-form', onsubmit: ev => {
    ev.preventDefault();
    const v = actor.value.trim();
    if (v) sessionStorage.setItem('dbActor', v); else sessionStorage.removeItem('dbActor');
    out.textContent = v ? `your changes are recorded as ${v}` : 'your changes are recorded without a name';
  }}, 'Record my changes as ', actor, ' ', el('button', {type: 'submit', id: 'actor-save'}, 'Save'));
  // The filter: actor (exact), operation and state; the same in the API and the CLI.
  const sel = (name, opts) => el('select', {name, id: 'af-' + name}, opts.map(o => {
    const opt = el('option', {value: o}, o || 'any ' + name);
    if (o === (p.get(name) || '')) opt.setAttribute('selected', '');
    return opt;
  }));
  const filter = el('form', {id: 'audit-filter', onsubmit: ev => {
    ev.preventDefault();
    const n = new URLSearchParams();
    for (const k of ['actor', 'op', 'state']) {
      const v = filter.elements[k].value.trim();
      if (v) n.set(k, v);
    }
    go('/audit', n);
  }}, el('input', {name: 'actor', id: 'af-actor', placeholder: 'actor (exactly as recorded)', value: p.get('actor') || '', size: 24}),
  sel('op', ['', 'cancel', 'reschedule', 'deliver-now', 'redrive', 'purge']), sel('state', ['', 'running', 'done', 'interrupted']),
  el('button', {type: 'submit', id: 'af-apply'}, 'Filter'),
  (p.get('actor') || p.get('op') || p.get('state')) ? el('a', {href: '#/audit', id: 'af-clear'}, 'clear') : null);
  const filtered = p.get('actor') || p.get('op') || p.get('state');
  view.replaceChildren(el('h2', {}, 'Audit log'), actorForm, filter,
    el('table', {id: 'audit'}, el('thead', {}, el('tr', {},
      ['at (UTC)', 'operation', 'selector / id', '', 'matched', 'changed', 'state', 'actor', 'remote', 'op id'].map(h => el('th', {}, h)))),
    el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', {colspan: 10},
      res.next_cursor ? 'none matched among the entries read: older ones may' : filtered ? 'no change matches the filter' : 'no change recorded yet')))),
    el('p', {}, p.get('cursor') ? el('a', {href: '#/audit', id: 'audit-newest'}, 'Newest') : null, ' ', more), out,
    el('p', {class: 'sub'}, 'Every change made through the API, the CLI and this console. An interrupted bulk change (its client or replica gone) can be resumed: it finishes exactly as it began.'));
};
