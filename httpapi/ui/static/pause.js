// Paused targets on the overview's Targets table (POST /v1/targets/pause and /resume):
// a target's pause/resume button, and the paused globs with theirs. Every change is
// audited by the API; the overview refreshes afterwards.
'use strict';

// pauseCell is a target's cell: "paused" with a resume button when the target itself is a
// paused glob, "paused by <glob>" when a wider glob pauses it, else a pause button.
function pauseCell(t, paused) {
  const own = paused.some(p => p.target === t.target);
  if (t.paused && !own) {
    const by = paused.map(p => p.target).join(', ');
    return el('td', {class: 'paused'}, 'paused (', by, ')');
  }
  const op = t.paused ? 'resume' : 'pause';
  return el('td', {class: t.paused ? 'paused' : ''}, t.paused ? 'paused ' : '',
    el('button', {class: 'pause-btn', 'data-target': t.target, onclick: () => pauseTarget(op, t.target)}, op));
}

// pausedList is the paused globs with their resume buttons and a form to pause a glob.
function pausedList(paused) {
  const rows = paused.map(p => el('tr', {},
    el('td', {}, el('code', {}, p.target)), el('td', {}, fmtTime(p.since)),
    el('td', {}, el('button', {class: 'resume-glob', 'data-target': p.target, onclick: () => pauseTarget('resume', p.target)}, 'resume'))));
  const input = el('input', {id: 'pause-glob', name: 'pause-glob', placeholder: 'target glob, e.g. orders.* or kafka:billing.*'});
  const form = el('form', {id: 'pause-form', onsubmit: e => { e.preventDefault(); if (input.value) pauseTarget('pause', input.value); }},
    input, el('button', {type: 'submit', id: 'pause-submit'}, 'pause'));
  return el('section', {class: 'card wide', id: 'paused'}, el('h3', {}, 'Paused targets (not published, not retried; kept parked)'),
    rows.length ? el('table', {id: 'paused-globs'}, el('thead', {}, el('tr', {}, el('th', {}, 'glob'), el('th', {}, 'paused since (UTC)'), el('th', {}, ''))),
      el('tbody', {}, rows)) : el('p', {class: 'sub'}, 'none paused'),
    form, el('p', {class: 'result', id: 'pause-result'}));
}

// pauseTarget pauses or resumes glob, then shows the answer and refreshes the overview.
async function pauseTarget(op, glob) {
  try {
    const r = await api('POST', '/v1/targets/' + op, {target: glob});
    const msg = op === 'pause'
      ? (r.changed ? 'paused ' : 'already paused: ') + r.target + '; every replica stops publishing it within a second'
      : (r.changed ? 'resumed ' : 'was not paused: ') + r.target + '; ' + r.moved + ' waiting messages back in due order';
    showError('');
    await overview();
    const out = document.getElementById('pause-result');
    if (out) out.textContent = msg;
  } catch (e) {
    showError(op + ' ' + glob + ': ' + e.message);
  }
}
