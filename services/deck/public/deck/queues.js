// @ts-check
// The job queues: a row per queue with its controls (MaxWorkers, zombie
// timeout, pause, active), and the dead letters of one queue with requeue.
// Rows are kept across polls, not redrawn, so that an input the operator is
// editing keeps its value and focus.
import { api } from './api.js'
import { $, el } from './dom.js'

/** @type {string | null} the queue whose dead letters are open */
let deadQueue = null
/** @type {Map<string, any>} the server's last values per queue, to send only what changed */
const queueSeen = new Map()

/** @param {any[]} queues */
export function renderQueues (queues) {
  const body = $('queue-rows')
  const names = new Set(queues.map(q => q.name))
  for (const row of [...body.querySelectorAll('tr')]) if (!names.has(row.dataset.queue ?? '')) row.remove()
  for (const q of queues) {
    let row = /** @type {HTMLTableRowElement | null} */ (body.querySelector(`tr[data-queue="${CSS.escape(q.name)}"]`))
    if (!row) { row = /** @type {HTMLTableRowElement} */ (queueRow(q)); body.append(row) }
    const cells = row.querySelectorAll('td')
    cells[1].textContent = `${q.jobs.pending} / ${q.jobs.fetched} / ${q.jobs.processing}`
    cells[2].textContent = `${q.running} / ${q.maxWorkers ?? '∞'}`
    cells[2].classList.toggle('over', q.maxWorkers !== null && q.running > q.maxWorkers)
    cells[3].textContent = `${q.oldestPendingAgeSeconds.toFixed(1)} s`
    const deadButton = /** @type {HTMLButtonElement} */ (cells[4].firstChild)
    deadButton.textContent = String(q.jobs.dead)
    // Inputs follow the server unless the operator is editing them.
    const prev = queueSeen.get(q.name)
    const tr = row
    const sync = (/** @type {string} */ cls, /** @type {string} */ key, /** @type {(v: any) => void} */ set) => {
      const input = /** @type {HTMLInputElement} */ (tr.querySelector(`.${cls}`))
      if (document.activeElement !== input && (!prev || input.dataset.dirty !== '1' || prev[key] !== q[key])) { set(input); input.dataset.dirty = '' }
    }
    sync('max-workers', 'maxWorkers', i => { i.value = q.maxWorkers === null ? '' : String(q.maxWorkers) })
    sync('zombie', 'zombieTimeoutSeconds', i => { i.value = String(q.zombieTimeoutSeconds) })
    sync('paused', 'paused', i => { i.checked = q.paused })
    sync('active', 'active', i => { i.checked = q.active })
    queueSeen.set(q.name, q)
  }
}

/** @param {any} q */
function queueRow (q) {
  const dead = el('button', { type: 'button', class: 'ghost dead-open', title: 'show dead letters' }, '0')
  dead.addEventListener('click', () => { void showDead(q.name) })
  const maxW = el('input', { type: 'number', class: 'max-workers', min: '0', max: '10000', placeholder: '∞', 'aria-label': `max workers of ${q.name}` })
  const zombie = el('input', { type: 'number', class: 'zombie', min: '1', max: '86400', 'aria-label': `zombie timeout of ${q.name}` })
  const paused = el('input', { type: 'checkbox', class: 'paused', 'aria-label': `pause ${q.name}` })
  const active = el('input', { type: 'checkbox', class: 'active', 'aria-label': `${q.name} active` })
  const save = el('button', { type: 'button', class: 'save' }, 'Save')
  for (const i of [maxW, zombie]) i.addEventListener('input', () => { i.dataset.dirty = '1' })
  for (const i of [maxW, zombie]) i.addEventListener('keydown', ev => { if (/** @type {KeyboardEvent} */ (ev).key === 'Enter') save.click() })
  paused.addEventListener('change', () => { void patchQueue(q.name, { paused: /** @type {HTMLInputElement} */ (paused).checked }) })
  active.addEventListener('change', () => { void patchQueue(q.name, { active: /** @type {HTMLInputElement} */ (active).checked }) })
  save.addEventListener('click', () => {
    const seen = queueSeen.get(q.name)
    /** @type {Record<string, unknown>} */
    const patch = {}
    const mw = /** @type {HTMLInputElement} */ (maxW).value.trim()
    const want = mw === '' ? null : Number(mw)
    if (want !== seen?.maxWorkers) patch.maxWorkers = want
    const z = Number(/** @type {HTMLInputElement} */ (zombie).value)
    if (z !== seen?.zombieTimeoutSeconds) patch.zombieTimeoutSeconds = z
    if (Object.keys(patch).length === 0) { say(`${q.name}: nothing changed`); return }
    void patchQueue(q.name, patch)
  })
  const row = el('tr', { 'data-queue': q.name },
    el('td', {}, el('code', {}, q.name)), el('td'), el('td'), el('td'), el('td', {}, dead),
    el('td', {}, maxW), el('td', {}, zombie), el('td', {}, paused), el('td', {}, active), el('td', {}, save))
  return row
}

/** @param {string} text @param {boolean} [bad] */
function say (text, bad = false) {
  const m = $('queue-msg')
  m.textContent = text
  m.classList.toggle('bad', bad)
}

/** @param {string} name @param {Record<string, unknown>} patch */
async function patchQueue (name, patch) {
  const before = queueSeen.get(name)
  try {
    const after = await api('PATCH', `/admin/queues/${encodeURIComponent(name)}`, patch)
    const fmt = (/** @type {unknown} */ v) => v === null ? 'unlimited' : String(v)
    say(`${name}: ${Object.keys(patch).map(k => `${k} ${fmt(before?.[k])} → ${fmt(after[k])}`).join(', ')}`)
    for (const i of document.querySelectorAll(`tr[data-queue="${CSS.escape(name)}"] input`)) { const box = /** @type {HTMLInputElement} */ (i); box.dataset.dirty = '' }
    renderQueues([...[...queueSeen.values()].filter(q => q.name !== name), after])
  } catch (e) {
    say(`${name}: ${/** @type {Error} */ (e).message}`, true)
  }
}

/** @param {string} name */
async function showDead (name) {
  deadQueue = name
  const { jobs } = await api('GET', `/admin/queues/${encodeURIComponent(name)}/dead`)
  $('dead-queue').textContent = name
  $('dead').hidden = false
  $('dead-rows').replaceChildren(...jobs.map((/** @type {any} */ j) => {
    const b = el('button', { type: 'button', class: 'requeue' }, 'Requeue')
    b.addEventListener('click', () => { void requeue(name, [j.id]) })
    return el('tr', { 'data-job': j.id },
      el('td', {}, j.id), el('td', {}, j.type), el('td', {}, j.reason), el('td', {}, String(j.attempts)),
      el('td', { class: 'err', title: j.lastError ?? '' }, j.lastError ?? ''), el('td', {}, new Date(j.diedAt).toLocaleString()), el('td', {}, b))
  }))
  if (jobs.length === 0) $('dead-rows').replaceChildren(el('tr', {}, el('td', { colspan: '7', class: 'muted' }, 'no dead jobs')))
}

/** The open dead letters again, if any are open (each poll). */
export async function refreshDead () {
  if (deadQueue) await showDead(deadQueue)
}

/** @param {string} name @param {string[] | undefined} ids */
async function requeue (name, ids) {
  try {
    const r = await api('POST', `/admin/queues/${encodeURIComponent(name)}/dead/requeue`, ids ? { ids } : {})
    say(`${name}: ${r.requeued} dead job(s) back to pending`)
    await showDead(name)
  } catch (e) {
    say(`${name}: ${/** @type {Error} */ (e).message}`, true)
  }
}

export function wireQueues () {
  $('dead-requeue-all').addEventListener('click', () => { if (deadQueue) void requeue(deadQueue, undefined) })
  $('dead-close').addEventListener('click', () => { deadQueue = null; $('dead').hidden = true })
}

export function clearQueues () {
  for (const id of ['queue-rows', 'dead-rows']) $(id).replaceChildren()
  queueSeen.clear()
  deadQueue = null
  $('dead').hidden = true
}
