// delaybridge console: the dead-letters page (#/dead-letters), over GET /v1/dead-letters
// and POST /v1/dead-letters/redrive. Uses app.js's el, api, go, params, fmtTime, num; every
// value from the API is inserted as text. A redrive is always a dry run first, then a
// confirm step that sends the same selection.
'use strict';

async function deadLetters() {
  const p = params();
  const q = new URLSearchParams();
  for (const k of ['reason', 'cursor']) if (p.get(k)) q.set(k, p.get(k));
  q.set('limit', p.get('limit') || '50');
  const res = await api('GET', '/v1/dead-letters?' + q.toString());
  const reason = p.get('reason') || '';
  const form = el('form', {id: 'dl-filter', onsubmit: e => {
    e.preventDefault();
    const n = new URLSearchParams();
    const v = form.elements.reason.value.trim();
    if (v) n.set('reason', v);
    go('/dead-letters', n);
  }}, el('input', {name: 'reason', id: 'dl-reason', placeholder: 'reason: publish_failed, expired, …', value: reason}),
  el('button', {type: 'submit', id: 'dl-apply'}, 'Filter'));
  const picked = new Set();
  const selBtn = el('button', {id: 'dl-redrive-selected', disabled: ''}, 'Redrive selected…');
  const rows = res.dead_letters.map(d => el('tr', {},
    el('td', {}, el('input', {type: 'checkbox', class: 'dl-pick', 'data-id': d.id, onchange: e => {
      if (e.target.checked) picked.add(d.id); else picked.delete(d.id);
      selBtn.disabled = picked.size === 0;
      selBtn.textContent = picked.size ? `Redrive ${picked.size} selected…` : 'Redrive selected…';
    }})),
    el('td', {}, d.id), el('td', {}, el('a', {href: '#/dead-letters?reason=' + encodeURIComponent(d.reason), class: 'dl-reason-link'}, d.reason)),
    el('td', {class: 'dl-error'}, d.error), el('td', {}, d.target || '-'), el('td', {}, fmtTime(d.at)), el('td', {class: 'n'}, num(d.size))));
  let more = null;
  if (res.next_cursor) {
    const n = new URLSearchParams(p);
    n.set('cursor', res.next_cursor);
    more = el('button', {id: 'dl-next-page', onclick: () => go('/dead-letters', n)}, 'Next page');
  }
  const out = el('div', {id: 'dl-result', class: 'result'});
  const confirmBtn = el('button', {id: 'dl-confirm', class: 'danger', hidden: ''});
  let pending = null; // the selection the dry run was for
  const dry = async (sel, what) => {
    confirmBtn.hidden = true;
    pending = null;
    try {
      const r = await api('POST', '/v1/dead-letters/redrive', Object.assign({dry_run: true}, sel));
      out.replaceChildren(el('p', {}, `dry run (${what}): ${r.matched} dead letters would be redriven`), tally(r, true));
      if (r.matched > 0) {
        pending = sel;
        confirmBtn.textContent = `Confirm: redrive ${r.matched} dead letters`;
        confirmBtn.hidden = false;
      }
    } catch (e) { out.replaceChildren(el('p', {}, 'dry run failed: ' + e.message)); }
  };
  confirmBtn.addEventListener('click', async () => {
    confirmBtn.hidden = true;
    const sel = pending;
    pending = null;
    if (!sel) return;
    try {
      const r = await api('POST', '/v1/dead-letters/redrive', Object.assign({dry_run: false}, sel));
      out.replaceChildren(el('p', {id: 'dl-done'}, `redriven: ${r.changed} of ${r.matched} sent back` + (r.more ? ' (time limit: run it again for the rest)' : '')), tally(r, false));
    } catch (e) { out.replaceChildren(el('p', {}, 'redrive failed: ' + e.message)); }
  });
  selBtn.addEventListener('click', () => dry({ids: [...picked]}, picked.size + ' selected'));
  const reasonBtn = reason ? el('button', {id: 'dl-redrive-reason', onclick: () => dry({reason}, 'reason ' + reason)}, `Redrive all ${reason}…`) : null;
  view.replaceChildren(el('h2', {}, 'Dead letters'), form,
    el('table', {id: 'dead-letters'}, el('thead', {}, el('tr', {}, ['', 'id', 'reason', 'error', 'target', 'at (UTC)', 'size'].map(h => el('th', {}, h)))),
      el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', {colspan: 7}, res.next_cursor ? 'none on this page yet: go on' : 'no dead letter' + (reason ? ' of reason ' + reason : ''))))),
    el('p', {}, p.get('cursor') ? el('a', {href: '#/dead-letters' + (reason ? '?reason=' + encodeURIComponent(reason) : ''), id: 'dl-first-page'}, 'First page') : null, ' ', more),
    el('p', {class: 'actions'}, selBtn, ' ', reasonBtn, ' ', confirmBtn), out,
    el('p', {class: 'sub'}, 'Redrive sends dead letters back through the bridge, which checks them again. A dry run counts them first; nothing is sent until you confirm.' +
      ' Filter by a reason to redrive all of it.'));
}

// tally is the counts of a redrive by reason.
function tally(r, dryRun) {
  const cols = dryRun ? ['reason', 'would redrive', 'left'] : ['reason', 'redriven', 'refused again', 'left', 'other run'];
  const rows = Object.keys(r.by_reason || {}).sort().map(k => {
    const t = r.by_reason[k];
    const vals = dryRun ? [t.selected, t.left] : [t.redriven, t.refused_again, t.left, t.other_run];
    return el('tr', {}, el('td', {}, k), vals.map(v => el('td', {class: 'n'}, num(v))));
  });
  return el('table', {id: 'dl-tally'}, el('thead', {}, el('tr', {}, cols.map(h => el('th', {}, h)))),
    el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', {colspan: cols.length}, 'no dead letter matched'))));
}

pages['/dead-letters'] = deadLetters;
