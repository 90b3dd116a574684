// @ts-check
// The Deck's page. It polls the admin API every second with the tab's token and
// redraws. Every value from the API reaches the DOM as text, never as HTML: a
// dead job's last error can hold anything. Without a token it shows only the
// token form; signing out (or a refused token) clears everything it drew.
// ES modules served as they are (no build step), one per concern; this one
// holds the session and starts the page.
import { api, forget, hasToken, onRefused, remember } from './api.js'
import { $, input } from './dom.js'
import { refreshFaults, wireFaults } from './faults.js'
import { clearLanes } from './lanes.js'
import { renderFreshness, schedule, stopPolling } from './poll.js'
import { clearQueues, wireQueues } from './queues.js'
import { clearTimeline } from './timeline.js'

/** @param {string} [why] */
function signOut (why) {
  forget()
  stopPolling()
  clearLanes()
  clearQueues()
  clearTimeline()
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

onRefused(signOut)
$('login-form').addEventListener('submit', async ev => {
  ev.preventDefault()
  remember(input('token').value.trim(), input('operator').value.trim())
  try {
    await api('GET', '/admin/lanes')
    await openDeck()
  } catch (e) {
    if (/** @type {import('./api.js').ApiError} */ (e).status !== 401) signOut(`The deck did not answer: ${/** @type {Error} */ (e).message}`)
  }
})
$('signout').addEventListener('click', () => signOut())
wireQueues()
wireFaults()

setInterval(renderFreshness, 1000)
if (hasToken()) void openDeck()
else signOut()
