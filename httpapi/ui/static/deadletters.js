// delaybridge console: the dead-letters pages, over the message API's dead-letter routes:
// #/dead-letters (counts by reason, which filter the list; the list; redrive and purge,
// each a dry run first, then a confirm step that sends the same selection) and
// #/dead-letter?id=<id> (one letter: headers and payload). Uses app.js's el, api, go,
// params, fmtTime, num; every value from the API is inserted as text, never as HTML.
'use strict';

const dlHref = id => '#/dead-letter?id=' + encodeURIComponent(id);

// reasonChips are the counts by reason (GET /v1/dead-letters/counts): each a link that
// filters the list, the one shown marked; "all" clears the filter.
function reasonChips(counts, reason) {
  const names = Object.keys(counts.by_reason).sort((a, b) => counts.by_reason[b] - counts.by_reason[a] || a.localeCompare(b));
  const chip = (r, n, label) => el('a', {href: '#/dead-letters' + (r ? '?reason=' + encodeURIComponent(r) : ''),
    class: 'dl-chip' + (r === reason ? ' on' : ''), 'data-reason': r}, el('span', {class: 'dl-chip-name'}, label), el('span', {class: 'dl-chip-n'}, num(n)));
  return el('nav', {id: 'dl-reasons'}, chip('', counts.total, 'all'), names.map(r => chip(r, counts.by_reason[r], r)),
    counts.complete ? null : el('span', {class: 'sub'}, ' counted for 3 s: the oldest letters only'));
}

async function deadLetters() {
  const p = params();
  const reason = p.get('reason') || '';
  const q = new URLSearchParams();
  for (const k of ['reason', 'cursor']) if (p.get(k)) q.set(k, p.get(k));
  q.set('limit', p.get('limit') || '50');
  const [res, counts] = await Promise.all([api('GET', '/v1/dead-letters?' + q.toString()), api('GET', '/v1/dead-letters/counts')]);
  const picked = new Set();
  const selBtn = el('button', {id: 'dl-redrive-selected', disabled: ''}, 'Redrive selected…');
  const selPurge = el('button', {id: 'dl-purge-selected', class: 'danger', disabled: ''}, 'Delete selected…');
  const pick = (id, on) => {
    if (on) picked.add(id); else picked.delete(id);
    selBtn.disabled = selPurge.disabled = picked.size === 0;
    selBtn.textContent = picked.size ? `Redrive ${picked.size} selected…` : 'Redrive selected…';
    selPurge.textContent = picked.size ? `Delete ${picked.size} selected…` : 'Delete selected…';
  };
  const rows = res.dead_letters.map(d => el('tr', {},
    el('td', {}, el('input', {type: 'checkbox', class: 'dl-pick', 'data-id': d.id, onchange: e => pick(d.id, e.target.checked)})),
    el('td', {}, el('a', {href: dlHref(d.id), class: 'dl-open'}, d.id)),
    el('td', {}, el('a', {href: '#/dead-letters?reason=' + encodeURIComponent(d.reason), class: 'dl-reason-link'}, d.reason)),
    el('td', {class: 'dl-error', title: d.error}, d.error), el('td', {class: 'dl-target'}, d.target || '-'),
    el('td', {class: 'dl-at'}, fmtTime(d.at)), el('td', {class: 'n'}, num(d.size))));
  let more = null;
  if (res.next_cursor) {
    const n = new URLSearchParams(p);
    n.set('cursor', res.next_cursor);
    more = el('button', {id: 'dl-next-page', onclick: () => go('/dead-letters', n)}, 'Next page');
  }
  const out = el('div', {id: 'dl-result', class: 'result'});
  const confirmBtn = el('button', {id: 'dl-confirm', class: 'danger', hidden: ''});
  let pending = null; // {op, sel} the dry run was for
  const dry = async (op, sel, what) => {
    confirmBtn.hidden = true;
    pending = null;
    const verb = op === 'purge' ? 'deleted' : 'redriven';
    try {
      const r = await api('POST', '/v1/dead-letters/' + op, Object.assign({dry_run: true}, sel));
      out.replaceChildren(el('p', {}, `dry run (${what}): ${r.matched} dead letters would be ${verb}`), op === 'purge' ? purgeTally(r) : tally(r, true));
      if (r.matched > 0) {
        pending = {op, sel};
        confirmBtn.textContent = op === 'purge' ? `Confirm: delete ${r.matched} dead letters for good` : `Confirm: redrive ${r.matched} dead letters`;
        confirmBtn.hidden = false;
      }
    } catch (e) { out.replaceChildren(el('p', {}, 'dry run failed: ' + e.message)); }
  };
  confirmBtn.addEventListener('click', async () => {
    confirmBtn.hidden = true;
    const run = pending;
    pending = null;
    if (!run) return;
    try {
      const r = await api('POST', '/v1/dead-letters/' + run.op, Object.assign({dry_run: false}, run.sel));
      const again = r.more ? ' (time limit: run it again for the rest)' : '';
      if (run.op === 'purge') {
        out.replaceChildren(el('p', {id: 'dl-done'}, `deleted: ${r.purged} of ${r.matched}` + again), purgeTally(r));
      } else {
        out.replaceChildren(el('p', {id: 'dl-done'}, `redriven: ${r.changed} of ${r.matched} sent back` + again), tally(r, false));
      }
    } catch (e) { out.replaceChildren(el('p', {}, (run.op === 'purge' ? 'delete' : 'redrive') + ' failed: ' + e.message)); }
  });
  selBtn.addEventListener('click', () => dry('redrive', {ids: [...picked]}, picked.size + ' selected'));
  selPurge.addEventListener('click', () => dry('purge', {ids: [...picked]}, picked.size + ' selected'));
  const byReason = reason ? [
    el('button', {id: 'dl-redrive-reason', onclick: () => dry('redrive', {reason}, 'reason ' + reason)}, `Redrive all ${reason}…`), ' ',
    el('button', {id: 'dl-purge-reason', class: 'danger', onclick: () => dry('purge', {reason}, 'reason ' + reason)}, `Delete all ${reason}…`)] : null;
  view.replaceChildren(el('h2', {}, 'Dead letters'), reasonChips(counts, reason),
    el('table', {id: 'dead-letters'}, el('thead', {}, el('tr', {}, ['', 'id', 'reason', 'error', 'target', 'at (UTC)', 'size'].map(h => el('th', {}, h)))),
      el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', {colspan: 7}, res.next_cursor ? 'none on this page yet: go on' : 'no dead letter' + (reason ? ' of reason ' + reason : ''))))),
    el('p', {}, p.get('cursor') ? el('a', {href: '#/dead-letters' + (reason ? '?reason=' + encodeURIComponent(reason) : ''), id: 'dl-first-page'}, 'First page') : null, ' ', more),
    el('p', {class: 'actions'}, selBtn, ' ', selPurge, ' ', byReason, ' ', confirmBtn), out,
    el('p', {class: 'sub'}, 'Click a reason to list only its letters (and redrive or delete all of it); click an id to open a letter. ' +
      'Redrive sends dead letters back through the bridge, which checks them again; delete removes them for good (NATS only). ' +
      'A dry run counts them first; nothing changes until you confirm. Both are in the audit log.'));
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

// purgeTally is the counts of a purge by reason.
function purgeTally(r) {
  const cols = r.dry_run ? ['reason', 'would delete', 'left'] : ['reason', 'deleted', 'left', 'other run'];
  const rows = Object.keys(r.by_reason || {}).sort().map(k => {
    const t = r.by_reason[k];
    const vals = r.dry_run ? [t.selected, t.left] : [t.purged, t.left, t.other_run];
    return el('tr', {}, el('td', {}, k), vals.map(v => el('td', {class: 'n'}, num(v))));
  });
  return el('table', {id: 'dl-tally'}, el('thead', {}, el('tr', {}, cols.map(h => el('th', {}, h)))),
    el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', {colspan: cols.length}, 'no dead letter matched'))));
}

// deadLetter is one letter (#/dead-letter?id=<id>): its fields, headers and payload,
// all as text; a payload that is not UTF-8 comes as base64 and is shown so.
async function deadLetter() {
  const id = params().get('id') || '';
  let d;
  try {
    d = await api('GET', '/v1/dead-letters/' + encodeURIComponent(id));
  } catch (e) {
    view.replaceChildren(el('p', {id: 'gone'}, 'No dead letter ', el('code', {}, id), ': ' + e.message), el('a', {href: '#/dead-letters'}, 'Back to the list'));
    return;
  }
  const out = el('div', {id: 'dl-result', class: 'result'});
  const confirmBtn = el('button', {id: 'dl-confirm', class: 'danger', hidden: ''}, 'Confirm: delete this dead letter for good');
  const purge = async dryRun => {
    try {
      const r = await api('POST', '/v1/dead-letters/purge', {ids: [d.id], dry_run: dryRun});
      if (dryRun) {
        out.replaceChildren(el('p', {}, r.matched ? 'dry run: this letter would be deleted' : 'dry run: nothing to delete (gone already)'));
        confirmBtn.hidden = !r.matched;
      } else {
        confirmBtn.hidden = true;
        out.replaceChildren(el('p', {id: 'dl-done'}, r.purged ? 'deleted' : 'not deleted: gone already'));
      }
    } catch (e) { out.replaceChildren(el('p', {}, 'delete failed: ' + e.message)); }
  };
  confirmBtn.addEventListener('click', () => purge(false));
  const hdrs = (d.headers || []).map(h => el('tr', {}, el('td', {class: 'dl-hkey'}, h.key), el('td', {class: 'dl-hval'}, h.value)));
  view.replaceChildren(
    el('p', {}, el('a', {href: '#/dead-letters', id: 'dl-back'}, '← Dead letters')),
    el('h2', {}, 'Dead letter ', el('code', {id: 'dl-id'}, d.id)),
    el('table', {id: 'detail'}, el('tbody', {},
      [['reason', el('a', {href: '#/dead-letters?reason=' + encodeURIComponent(d.reason)}, d.reason)], ['error', el('span', {id: 'dl-error-full'}, d.error || '-')],
        ['target', d.target || '-'], ['at (UTC)', fmtTime(d.at)], ['broker', d.broker], ['size', num(d.size) + ' bytes']].map(([k, v]) => el('tr', {}, el('th', {}, k), el('td', {}, v))))),
    el('h3', {}, 'Headers'), el('table', {id: 'dl-headers'}, el('tbody', {}, hdrs.length ? hdrs : el('tr', {}, el('td', {}, 'none')))),
    el('h3', {}, 'Payload ', el('span', {class: 'sub', id: 'dl-payload-enc'}, `${num(d.payload_size)} bytes, ` + (d.payload_encoding === 'base64' ? 'not UTF-8: shown as base64' : 'text'))),
    el('pre', {id: 'dl-payload'}, d.payload),
    el('p', {class: 'actions'}, el('button', {id: 'dl-purge-one', class: 'danger', onclick: () => purge(true)}, 'Delete…'), ' ', confirmBtn), out);
}

pages['/dead-letters'] = deadLetters;
pages['/dead-letter'] = deadLetter;
