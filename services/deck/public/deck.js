// @ts-check
// The Deck's page. It polls the admin API every second with the tab's token and
// redraws. Every value from the API reaches the DOM as text, never as HTML: a
// dead job's last error can hold anything. Without a token it shows only the
// token form; signing out (or a refused token) clears everything it drew.
'use strict'

;(() => {
  const TOKEN = 'watertight.deck.token'
  const OPERATOR = 'watertight.deck.operator'
  const POLL_MS = 1000
  const TIMELINE_SECONDS = 300
  /** @param {string} id */
  const $ = id => /** @type {HTMLElement} */ (document.getElementById(id))
  /** @param {string} id */
  const input = id => /** @type {HTMLInputElement} */ (document.getElementById(id))
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let timer
  let polling = false
  let tick = 0
  let lastOk = 0
  /** @type {any} */
  let chart = null
  /** @type {string | null} */
  let deadQueue = null
  /** @type {Map<string, any>} the server's last values per queue, to send only what changed */
  const queueSeen = new Map()

  /**
   * @param {string} tag
   * @param {Record<string, string>} [attrs]
   * @param {...(Node | string)} children
   */
  function el (tag, attrs = {}, ...children) {
    const e = document.createElement(tag)
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v)
    e.append(...children)
    return e
  }

  class ApiError extends Error {
    /** @param {string} message @param {string | undefined} code @param {number} status */
    constructor (message, code, status) { super(message); this.code = code; this.status = status }
  }

  /** @param {string} method @param {string} path @param {unknown} [body] */
  async function api (method, path, body) {
    /** @type {Record<string, string>} */
    const headers = { authorization: `Bearer ${sessionStorage.getItem(TOKEN) ?? ''}`, accept: 'application/json' }
    const op = sessionStorage.getItem(OPERATOR)
    if (op) headers['x-operator'] = op
    if (body !== undefined) headers['content-type'] = 'application/json'
    const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store' })
    const json = await res.json().catch(() => null)
    if (res.status === 401) {
      signOut('The token was refused.')
      throw new ApiError('unauthenticated', 'ERR_UNAUTHENTICATED', 401)
    }
    if (!res.ok) throw new ApiError(json?.detail ?? `HTTP ${res.status}`, json?.code, res.status)
    return json
  }

  // ---- session -------------------------------------------------------------

  /** @param {string} [why] */
  function signOut (why) {
    sessionStorage.removeItem(TOKEN)
    sessionStorage.removeItem(OPERATOR)
    clearTimeout(timer)
    timer = undefined
    for (const id of ['lanes', 'processes', 'queue-rows', 'dead-rows', 'timeline']) $(id).replaceChildren()
    chart?.destroy()
    chart = null
    queueSeen.clear()
    deadQueue = null
    $('dead').hidden = true
    $('deck').hidden = true
    $('session').hidden = true
    $('login').hidden = false
    const err = $('login-error')
    err.textContent = why ?? ''
    err.hidden = !why
    input('token').value = ''
  }

  async function openDeck () {
    $('login').hidden = true
    $('deck').hidden = false
    $('session').hidden = false
    await refreshFaults()
    schedule(0)
  }

  $('login-form').addEventListener('submit', async ev => {
    ev.preventDefault()
    const token = input('token').value.trim()
    const op = input('operator').value.trim()
    sessionStorage.setItem(TOKEN, token)
    if (op) sessionStorage.setItem(OPERATOR, op)
    try {
      await api('GET', '/admin/lanes')
      await openDeck()
    } catch (e) {
      if (/** @type {ApiError} */ (e).status !== 401) signOut(`The deck did not answer: ${/** @type {Error} */ (e).message}`)
    }
  })
  $('signout').addEventListener('click', () => signOut())

  // ---- polling -------------------------------------------------------------

  /** @param {number} ms */
  function schedule (ms) {
    clearTimeout(timer)
    timer = setTimeout(poll, ms)
  }

  async function poll () {
    if (polling || !sessionStorage.getItem(TOKEN)) return
    polling = true
    const began = Date.now()
    try {
      const [lanes, queues, timeline] = await Promise.all([
        api('GET', '/admin/lanes'), api('GET', '/admin/queues'), api('GET', `/admin/timeline?seconds=${TIMELINE_SECONDS}`),
      ])
      renderLanes(lanes)
      renderQueues(queues.queues)
      renderTimeline(timeline.points)
      if (deadQueue) await showDead(deadQueue)
      if (++tick % 5 === 0) await refreshFaults()
      lastOk = Date.now()
    } catch (e) {
      if (/** @type {ApiError} */ (e).status === 401) return
    } finally {
      polling = false
      renderFreshness()
    }
    if (sessionStorage.getItem(TOKEN)) schedule(Math.max(0, POLL_MS - (Date.now() - began)))
  }

  function renderFreshness () {
    const f = $('freshness')
    if (!lastOk) { f.textContent = 'connecting…'; return }
    const age = (Date.now() - lastOk) / 1000
    f.textContent = `updated ${new Date(lastOk).toLocaleTimeString()} · every ${POLL_MS / 1000} s`
    f.classList.toggle('stale', age > 3)
  }

  // ---- lanes ---------------------------------------------------------------

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
      ...(f.top.length ? [el('ol', { class: 'top-tenants' }, ...f.top.map((/** @type {any} */ x) =>
        el('li', { 'data-tenant': x.tenant, class: x.held > x.share ? 'over' : '' }, `${x.tenant} · ${x.held} held${x.queued ? `, ${x.queued} queued` : ''} · share ${x.share}`)))] : []))
  }

  /** @param {any} data */
  function renderLanes (data) {
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

  // ---- timeline ------------------------------------------------------------

  /** @param {any[]} points */
  function renderTimeline (points) {
    const xs = points.map(p => p.t / 1000)
    const p99 = points.map(p => p.lanes['card-auth']?.p99Ms ?? null)
    const rej = points.map(p => p.lanes.tax?.rejectionsPerSecond ?? null)
    const data = [xs, p99, rej]
    const box = $('timeline')
    // @ts-expect-error uPlot is loaded by its own script tag
    const UPlot = window.uPlot
    if (!chart) {
      chart = new UPlot({
        width: Math.max(320, box.clientWidth), height: 240,
        scales: { x: { time: true }, ms: { auto: true, range: (/** @type {any} */ _u, /** @type {number} */ _min, /** @type {number} */ max) => [0, Math.max(10, max * 1.1)] }, rps: { auto: true, range: (/** @type {any} */ _u, /** @type {number} */ _min, /** @type {number} */ max) => [0, Math.max(5, max * 1.1)] } },
        series: [
          {},
          { label: 'card-auth p99 (ms)', scale: 'ms', stroke: '#58a6ff', width: 2, spanGaps: false },
          { label: 'tax rejections/s', scale: 'rps', stroke: '#f85149', width: 2, fill: 'rgba(248,81,73,0.12)' },
        ],
        axes: [
          { stroke: '#8b98a5', grid: { stroke: '#26313d' } },
          { scale: 'ms', stroke: '#58a6ff', grid: { stroke: '#26313d' }, label: 'ms' },
          { scale: 'rps', side: 1, stroke: '#f85149', grid: { show: false }, label: 'rejections/s' },
        ],
      }, data, box)
      window.addEventListener('resize', () => chart?.setSize({ width: Math.max(320, box.clientWidth), height: 240 }))
    } else {
      chart.setData(data)
    }
  }

  // ---- queues --------------------------------------------------------------

  /** @param {any[]} queues */
  function renderQueues (queues) {
    const body = $('queue-rows')
    const names = new Set(queues.map(q => q.name))
    for (const row of [...body.querySelectorAll('tr')]) if (!names.has(row.dataset.queue ?? '')) row.remove()
    for (const q of queues) {
      let row = /** @type {HTMLTableRowElement | null} */ (body.querySelector(`tr[data-queue="${CSS.escape(q.name)}"]`))
      if (!row) { row = queueRow(q); body.append(row) }
      const cells = row.querySelectorAll('td')
      cells[1].textContent = `${q.jobs.pending} / ${q.jobs.fetched} / ${q.jobs.processing}`
      cells[2].textContent = `${q.running} / ${q.maxWorkers ?? '∞'}`
      cells[2].classList.toggle('over', q.maxWorkers !== null && q.running > q.maxWorkers)
      cells[3].textContent = `${q.oldestPendingAgeSeconds.toFixed(1)} s`
      const deadButton = /** @type {HTMLButtonElement} */ (cells[4].firstChild)
      deadButton.textContent = String(q.jobs.dead)
      // Inputs follow the server unless the operator is editing them.
      const prev = queueSeen.get(q.name)
      const sync = (/** @type {string} */ cls, /** @type {string} */ key, /** @type {(v: any) => void} */ set) => {
        const input = /** @type {HTMLInputElement} */ (row.querySelector(`.${cls}`))
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
  $('dead-requeue-all').addEventListener('click', () => { if (deadQueue) void requeue(deadQueue, undefined) })
  $('dead-close').addEventListener('click', () => { deadQueue = null; $('dead').hidden = true })

  // ---- tax faults ----------------------------------------------------------

  /** @param {any} f */
  function showFaults (f) {
    $('faults-now').textContent = f.mode !== 'normal'
      ? `now: ${f.mode === 'hang' ? 'hanging (never answers)' : 'resetting connections'}`
      : !f.latencyMs && !f.jitterMs && !f.errorRate ? 'now: normal' : `now: latency ${f.latencyMs} ms ± ${f.jitterMs} ms, error rate ${f.errorRate}`
    $('faults-now').dataset.mode = f.mode
  }

  async function refreshFaults () {
    try {
      showFaults(await api('GET', '/admin/faults/tax'))
      $('faults-form').hidden = false
      $('faults-off').hidden = true
    } catch (e) {
      if (/** @type {ApiError} */ (e).code === 'ERR_FAULT_INJECTION_DISABLED') { $('faults-form').hidden = true; $('faults-off').hidden = false }
    }
  }

  /** @param {Record<string, unknown>} f */
  async function setFaults (f) {
    try {
      showFaults(await api('PUT', '/admin/faults/tax', f))
    } catch (e) {
      $('faults-now').textContent = `not applied: ${/** @type {Error} */ (e).message}`
    }
  }
  $('faults-form').addEventListener('submit', ev => {
    ev.preventDefault()
    const v = (/** @type {string} */ id) => input(id).value
    void setFaults({ latencyMs: Number(v('f-latency')), jitterMs: Number(v('f-jitter')), errorRate: Number(v('f-error')), mode: v('f-mode') })
  })
  $('f-clear').addEventListener('click', () => {
    for (const id of ['f-latency', 'f-jitter', 'f-error']) input(id).value = '0'
    input('f-mode').value = 'normal'
    void setFaults({ mode: 'normal' })
  })

  // ---- start ---------------------------------------------------------------

  setInterval(renderFreshness, 1000)
  if (sessionStorage.getItem(TOKEN)) void openDeck()
  else signOut()
})()
