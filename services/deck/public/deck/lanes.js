// @ts-check
// The lane tiles and the strip of other processes, redrawn whole from each
// /admin/lanes answer.
import { $, el } from './dom.js'

/** @param {number | null | undefined} v @param {number} [digits] */
const num = (v, digits = 0) => v === null || v === undefined ? '–' : v.toFixed(digits)

/** @param {string} label @param {string} value @param {string} key */
const stat = (label, value, key) => el('div', { class: 'stat', 'data-stat': key }, el('b', {}, value), el('span', {}, label))

/** The lane's replicas as the gateway balances them: address, state, in flight, requests sent. @param {any[]} rs */
const replicaLine = rs => el('div', { class: 'foot', 'data-role': 'replicas' },
  rs.length === 0 ? 'replicas at the gateway: none known' : `replicas at the gateway: ${rs.map(r => `${r.address} ${r.state} · ${r.inflight} in flight · ${r.requests} sent`).join('; ')}`)

/** Each outbound dependency's breaker: closed / open / half-open, since when. @param {any[]} bs @param {string} at */
const breakerLine = (bs, at) => el('div', { class: 'foot', 'data-role': 'breakers' },
  ...bs.map(b => el('span', { class: `breaker ${b.state}`, 'data-dependency': b.dependency, 'data-state': b.state },
    `${b.dependency} breaker ${b.state.replace('_', '-')} for ${Math.max(0, Math.round((Date.parse(at) - Date.parse(b.since)) / 1000))} s (since ${new Date(b.since).toLocaleTimeString()}) `)))

/**
 * Fair admission: tenants in flight, how many requests fairness shed, and the
 * 5 holding the most permits with their fair share. @param {any} f
 */
const tenantLine = f => {
  const who = f.by === 'client' ? 'API clients' : 'merchants'
  return el('div', { class: 'foot', 'data-role': 'tenants' },
    `${who} in flight: ${f.tenants} · shed over their share: ${f.shed}`,
    ...(f.top.length ? [topTenants(f.top)] : []))
}

/** The merchants (or clients) holding the most permits, the ones over their share marked. */
const topTenants = (/** @type {any[]} */ top) => el('ol', { class: 'top-tenants' }, ...top.map(x =>
  el('li', { 'data-tenant': x.tenant, class: x.held > x.share ? 'over' : '' },
    `${x.tenant} · ${x.held} held${x.queued ? `, ${x.queued} queued` : ''} · share ${x.share}`)))

/** @param {any} data */
export function renderLanes (data) {
  const tiles = data.lanes.map((/** @type {any} */ l) => {
    const s = l.status
    // A lane that did not answer in time is slow (starved of CPU, stalled), not gone.
    const slow = !l.up && l.error === 'timeout'
    const state = l.up && s ? s.state : slow ? 'UNRESPONSIVE' : 'DOWN'
    const tile = el('article', { class: 'tile', 'data-lane': l.name, 'data-state': state })
    tile.append(el('div', { class: 'tile-head' },
      el('span', { class: 'tile-name' }, l.name, el('small', {}, s ? s.priority : '')),
      el('span', { class: `badge ${state}`, 'data-role': 'state' }, state)))
    if (!s) {
      const seen = l.lastSeen
      const last = seen ? `; last seen ${seen.state}, ${seen.active} of ${seen.permits} permits, ${Math.max(0, Math.round((Date.parse(l.checkedAt) - Date.parse(seen.at)) / 1000))} s before` : ''
      tile.append(el('div', { class: 'foot', 'data-role': 'why' }, `${slow ? 'no answer within the deck\'s deadline' : `unreachable: ${l.error ?? 'unknown'}`}${last}`))
      return tile
    }
    const fill = el('div')
    fill.style.width = `${Math.min(100, 100 * s.active / s.permits)}%`
    const meter = el('div', { class: 'meter', title: `${s.active} of ${s.permits} permits in use` }, fill)
    const reasons = Object.entries(s.rejections).filter(([, n]) => Number(n) > 0).map(([r, n]) => `${r} ${n}`).join(', ')
    tile.append(
      meter,
      el('div', { class: 'stats' },
        stat('active / permits', `${s.active} / ${s.permits}`, 'active'),
        stat('queue / capacity', `${s.queue.depth} / ${s.queue.capacity}`, 'queue'),
        stat('rejections / s', num(l.rejectionsPerSecond, 1), 'rejections'),
        stat('p50 ms (1 min)', num(s.latency.p50Ms, 1), 'p50'),
        stat('p99 ms (1 min)', num(s.latency.p99Ms, 1), 'p99'),
        stat('pool total / idle / waiting', `${s.pool.total} / ${s.pool.idle} / ${s.pool.waiting}`, 'pool')),
      el('div', { class: 'foot' }, `pid ${s.pid} · rejected so far: ${reasons || 'none'}`),
      ...(s.breakers?.length ? [breakerLine(s.breakers, l.checkedAt)] : []),
      ...(s.fair && s.fair.by !== 'off' ? [tenantLine(s.fair)] : []),
      replicaLine(l.replicas ?? []))
    return tile
  })
  $('lanes').replaceChildren(...tiles)
  $('processes').replaceChildren(...data.processes.map((/** @type {any} */ p) =>
    el('span', { class: `proc ${p.up ? 'up' : 'down'}`, 'data-process': p.name, title: p.up ? `${p.url} up` : `${p.url}: ${p.error}` }, p.name)))
}

export function clearLanes () {
  for (const id of ['lanes', 'processes']) $(id).replaceChildren()
}
