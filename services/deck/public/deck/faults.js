// @ts-check
// The tax sandbox's fault control. A deck without a sandbox (production) says
// fault injection is off and hides the form.
import { api } from './api.js'
import { $, input } from './dom.js'

/** @param {any} f */
function showFaults (f) {
  $('faults-now').textContent = f.mode !== 'normal'
    ? `now: ${f.mode === 'hang' ? 'hanging (never answers)' : 'resetting connections'}`
    : !f.latencyMs && !f.jitterMs && !f.errorRate ? 'now: normal' : `now: latency ${f.latencyMs} ms ± ${f.jitterMs} ms, error rate ${f.errorRate}`
  $('faults-now').dataset.mode = f.mode
}

export async function refreshFaults () {
  try {
    showFaults(await api('GET', '/admin/faults/tax'))
    $('faults-form').hidden = false
    $('faults-off').hidden = true
  } catch (e) {
    if (/** @type {import('./api.js').ApiError} */ (e).code === 'ERR_FAULT_INJECTION_DISABLED') { $('faults-form').hidden = true; $('faults-off').hidden = false }
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

export function wireFaults () {
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
}
