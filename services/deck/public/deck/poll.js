// @ts-check
// Polling: every second the lanes, the queues and the timeline at once, the
// open dead letters, and every fifth round the fault state. One round at a
// time; the next starts a second after this one began, or at once if it was
// slower. The header says when the page last had an answer.
import { api, hasToken } from './api.js'
import { $ } from './dom.js'
import { refreshFaults } from './faults.js'
import { renderLanes } from './lanes.js'
import { refreshDead, renderQueues } from './queues.js'
import { renderTimeline } from './timeline.js'

const POLL_MS = 1000
const TIMELINE_SECONDS = 300
/** @type {ReturnType<typeof setTimeout> | undefined} */
let timer
let polling = false
let tick = 0
let lastOk = 0

/** @param {number} ms */
export function schedule (ms) {
  clearTimeout(timer)
  timer = setTimeout(poll, ms)
}

export function stopPolling () {
  clearTimeout(timer)
  timer = undefined
}

async function poll () {
  if (polling || !hasToken()) return
  polling = true
  const began = Date.now()
  try {
    const [lanes, queues, timeline] = await Promise.all([
      api('GET', '/admin/lanes'), api('GET', '/admin/queues'), api('GET', `/admin/timeline?seconds=${TIMELINE_SECONDS}`),
    ])
    renderLanes(lanes)
    renderQueues(queues.queues)
    renderTimeline(timeline.points)
    await refreshDead()
    if (++tick % 5 === 0) await refreshFaults()
    lastOk = Date.now()
  } catch (e) {
    if (/** @type {import('./api.js').ApiError} */ (e).status === 401) return
  } finally {
    polling = false
    renderFreshness()
  }
  if (hasToken()) schedule(Math.max(0, POLL_MS - (Date.now() - began)))
}

export function renderFreshness () {
  const f = $('freshness')
  if (!lastOk) { f.textContent = 'connecting…'; return }
  const age = (Date.now() - lastOk) / 1000
  f.textContent = `updated ${new Date(lastOk).toLocaleTimeString()} · every ${POLL_MS / 1000} s`
  f.classList.toggle('stale', age > 3)
}
