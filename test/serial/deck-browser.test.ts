/// <reference lib="dom" />
// The Deck in real headless Chromium against a real fleet: open it with the
// token, see three lanes NORMAL, inject a tax fault from the page and watch tax
// saturate while card-auth stays NORMAL, see a stopped lane UNRESPONSIVE (not
// DOWN) with its last state, change fraud-async MaxWorkers and
// requeue a dead job from the page, and check the page shows nothing without
// the token. A screenshot is saved to test-artifacts/deck.png.
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { launchChromium } from '../helpers/browser.ts'
import { testDatabase } from '../helpers/db.ts'
import { startDeck } from '../helpers/deck.ts'
import { startFleet } from '../helpers/fleet.ts'
import { call, eventually, sleep, type Res } from '../helpers/http.ts'
import { ROOT } from '../helpers/procs.ts'

// A short recovery window so the walk back to NORMAL fits in the test.
const env = { TAX_STATE_RECOVER_WINDOW_MS: '3000' }
const db = await testDatabase(t, env)
await db.query("insert into card_auth.card_accounts (token, currency, available) values ('tok_deck_1', 'EUR', 1000000000)")
const fleet = await startFleet(t, db, { env })
const deck = await startDeck(t, db, {
  cardAuth: fleet.lanes['card-auth']!.url,
  fraud: fleet.lanes.fraud!.url,
  tax: fleet.lanes.tax!.url,
  gateway: fleet.gateway.url,
  sandbox: fleet.sandbox.url,
})
const browser = await launchChromium(t)
const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } })
const page = await context.newPage()
const pageErrors: string[] = []
page.on('pageerror', e => pageErrors.push(e.message))
const artifacts = path.join(ROOT, 'test-artifacts')
fs.mkdirSync(artifacts, { recursive: true })

const tileStates = () => page.$$eval('[data-lane]', els => Object.fromEntries(els.map(e => [(e as HTMLElement).dataset.lane!, (e as HTMLElement).dataset.state!])))
const dbQueue = async (name: string) => (await db.query('select * from jobs.queues where name = $1', [name]))[0]!

t.test('without the token the page shows nothing sensitive, and the gateway has no admin routes', async t => {
  await page.goto(deck.url)
  await page.waitForSelector('#login:not([hidden])')
  t.equal(await page.locator('[data-lane]').count(), 0, 'no lane tiles')
  t.equal(await page.locator('#queue-rows tr').count(), 0, 'no queue rows')
  const text = await page.innerText('body')
  const pid = String((await fleet.status('card-auth')).pid)
  t.notOk(text.includes(pid) || text.includes('fraud-async') || text.includes('NORMAL'), 'no lane or queue data on screen')
  const status = await page.evaluate(async () => (await fetch('/admin/lanes')).status)
  t.equal(status, 401, 'the API refuses the page without a token')
  const viaGateway = await call(fleet.gateway.url + '/admin/lanes', { headers: { authorization: `Bearer ${fleet.apiKey}` } })
  t.equal(viaGateway.status, 404, 'the data-plane port does not route /admin')
  const withAdmin = await call(fleet.gateway.url + '/admin/lanes', { headers: { authorization: `Bearer ${deck.token}` } })
  t.equal(withAdmin.status, 404, 'nor does the admin token open anything there')
  t.equal(withAdmin.body.code, 'ERR_NOT_FOUND')
})

t.test('a wrong token is refused; the right one opens the deck for this tab only', async t => {
  await page.fill('#token', 'not-the-token-0123456789')
  await page.click('#login-form button[type=submit]')
  await page.waitForSelector('#login-error:not([hidden])')
  t.match(await page.innerText('#login-error'), /refused/, 'says the token was refused')
  t.equal(await page.locator('[data-lane]').count(), 0, 'and shows no data')

  await page.fill('#token', deck.token)
  await page.fill('#operator', 'deck-test')
  await page.click('#login-form button[type=submit]')
  await page.waitForFunction(() => document.querySelectorAll('[data-lane][data-state="NORMAL"]').length === 3, undefined, { timeout: 10_000 })
  t.same(await tileStates(), { 'card-auth': 'NORMAL', fraud: 'NORMAL', tax: 'NORMAL' }, 'three lanes NORMAL')
  const storage = await page.evaluate(() => ({ session: sessionStorage.getItem('watertight.deck.token'), local: localStorage.length, cookie: document.cookie }))
  t.same(storage, { session: deck.token, local: 0, cookie: '' }, 'the token lives in sessionStorage only')
  await page.waitForSelector('#processes [data-process="gateway"].up')
  await page.waitForSelector('#timeline canvas')
  t.pass('process strip and timeline chart drawn')
  const cardAddress = new URL(fleet.lanes['card-auth']!.url).host
  await page.waitForFunction(a => document.querySelector('[data-lane="card-auth"] [data-role="replicas"]')?.textContent?.includes(a), cardAddress, { timeout: 10_000 })
  t.match(await page.innerText('[data-lane="card-auth"] [data-role="replicas"]'), new RegExp(`^replicas at the gateway: ${cardAddress.replace(/\./g, '\\.')} ready · \\d+ in flight · \\d+ sent$`), 'each lane tile lists its replicas as the gateway balances them')
})

t.test('a tax fault from the page: tax saturates and recovers, card-auth stays NORMAL', async t => {
  await page.fill('#f-latency', '3000')
  await page.click('#f-apply')
  t.ok(await eventually(async () => (await call(fleet.sandbox.url + '/faults')).body.latencyMs === 3000, 5_000, 50), 'the sandbox got 3000 ms from the page')
  await page.waitForSelector('#faults-now[data-mode="normal"]')
  t.match(await page.innerText('#faults-now'), /latency 3000 ms/)

  const samples: Array<Record<string, string>> = []
  const taxRejections: number[] = []
  let sampling = true
  const sampler = (async () => {
    while (sampling) {
      samples.push(await tileStates())
      const r = await page.locator('[data-lane="tax"] [data-stat="rejections"] b').innerText().catch(() => '–')
      if (r !== '–') taxRejections.push(Number(r))
      await sleep(100)
    }
  })()
  // 60 tax quotes/s against 15 permits held up to the 400 ms quote deadline
  // (capacity ~37/s), and 20 authorizations/s alongside, for 4 s.
  const tax: Array<Promise<Res>> = []
  const cards: Array<Promise<Res>> = []
  let shot = false
  for (let i = 0; i < 240; i++) {
    tax.push(fleet.post('/v1/tax/quotes', { jurisdiction: 'DE', amount: { value: 1_000 + i, currency: 'EUR' } }))
    if (i % 3 === 0) cards.push(fleet.post('/v1/authorizations', { merchantId: 'm_deck', cardToken: 'tok_deck_1', amount: { value: 1, currency: 'EUR' } }))
    if (!shot && i > 150 && samples.at(-1)?.tax === 'SATURATED') {
      shot = true
      await page.screenshot({ path: path.join(artifacts, 'deck.png'), fullPage: true })
    }
    await sleep(1000 / 60)
  }
  const cardRes = await Promise.all(cards)
  await Promise.all(tax)
  await page.click('#f-clear')
  t.ok(await eventually(async () => (await call(fleet.sandbox.url + '/faults')).body.latencyMs === 0, 5_000, 50), 'back to normal from the page')
  const back = await eventually(async () => (await tileStates()).tax === 'NORMAL', 15_000, 100)
  sampling = false
  await sampler

  const taxSeen = new Set(samples.map(s => s.tax))
  t.ok(taxSeen.has('SATURATED'), `the tax tile turned SATURATED (seen: ${[...taxSeen].join(', ')})`)
  t.ok(taxSeen.has('RECOVERING'), 'then RECOVERING')
  t.ok(back, 'and NORMAL again after its recovery window')
  t.ok(samples.length > 20 && samples.every(s => s['card-auth'] === 'NORMAL'), `card-auth NORMAL in all ${samples.length} samples`)
  t.ok(cardRes.every(r => r.status === 201), `every authorization succeeded (${cardRes.length})`)
  t.ok(Math.max(...taxRejections) > 0, `the tax tile showed rejections/s (max ${Math.max(...taxRejections)})`)
  if (!shot) await page.screenshot({ path: path.join(artifacts, 'deck.png'), fullPage: true })
  const png = fs.readFileSync(path.join(artifacts, 'deck.png'))
  t.ok(png.subarray(1, 4).toString() === 'PNG' && png.length > 20_000, `screenshot saved: test-artifacts/deck.png (${png.length} bytes)`)
})

t.test('the tax tile shows the provider breaker\'s state as it changes', async t => {
  const line = '[data-lane="tax"] [data-role="breakers"] [data-dependency="tax-provider"]'
  await page.waitForSelector(`${line}[data-state="closed"]`, { timeout: 20_000 })
  t.match(await page.innerText(line), /^tax-provider breaker closed for \d+ s \(since .+\)$/, 'closed while the provider answers')
  // A hung provider: a dozen quotes at once are slow past the 1 s threshold, and it opens.
  await fleet.setFaults({ mode: 'hang' })
  const quotes = Array.from({ length: 12 }, (_x, i) => fleet.post('/v1/tax/quotes', { jurisdiction: 'DE', amount: { value: 500 + i, currency: 'EUR' } }))
  await page.waitForSelector(`${line}:is([data-state="open"], [data-state="half_open"])`, { timeout: 20_000 })
  t.match(await page.innerText(line), /^tax-provider breaker (open|half-open) for \d+ s/, 'open (or probing) once the provider hangs')
  const answered = await Promise.all(quotes)
  // This fleet has no certificate: the breaker changes when the table answers,
  // never whether an uncertified one may (ADV-UC-01).
  t.ok(answered.every(r => r.status === 503 && r.body.code === 'ERR_UNTESTED_COMPENSATION_REJECTED'), `the quotes were refused as uncertified, never given a rate (${JSON.stringify(answered.map(r => [r.status, r.body.source ?? r.body.code]))})`)
  await fleet.setFaults({ mode: 'normal' })
  await page.waitForSelector(`${line}[data-state="closed"]`, { timeout: 20_000 })
  t.pass('closed again on the page once a probe answered')
})

t.test('the card-auth tile lists the merchants holding the most permits, with their share', async t => {
  // m_deck_hot's card account is held, so its authorizations keep their permits
  // while the page is read (well inside the 5 s statement timeout).
  const holder = await db.pool.connect()
  t.teardown(async () => { await holder.query('rollback').catch(() => {}); holder.release() })
  await holder.query('begin')
  await holder.query("select 1 from card_auth.card_accounts where token = 'tok_deck_1' for update")
  const auths = Array.from({ length: 4 }, () => fleet.post('/v1/authorizations', { merchantId: 'm_deck_hot', cardToken: 'tok_deck_1', amount: { value: 1, currency: 'EUR' } }))
  const item = '[data-lane="card-auth"] [data-role="tenants"] [data-tenant="m_deck_hot"]'
  await page.waitForSelector(item, { timeout: 4_000 })
  t.match(await page.innerText('[data-lane="card-auth"] [data-role="tenants"]'), /^merchants in flight: 1 · shed over their share: \d+/, 'merchants in flight and those shed for their share')
  t.match(await page.innerText(item), /^m_deck_hot · 4 held · share 75$/, 'the merchant, its permits and its share')
  await holder.query('commit')
  t.ok((await Promise.all(auths)).every(r => r.status === 201), 'its authorizations complete once the row is free')
  await page.waitForSelector(item, { state: 'detached', timeout: 10_000 })
  t.pass('gone from the list once it holds nothing')
})

t.test('a lane that stops answering is UNRESPONSIVE with its last state, not DOWN; then NORMAL again', async t => {
  // SIGSTOP: the process is alive and holds its sockets, but answers nothing (as a lane
  // starved of CPU misses the deck's deadline). The stop is undone on the failure path too.
  const fraud = fleet.lanes.fraud!.proc
  t.teardown(() => { fraud.kill('SIGCONT') })
  fraud.kill('SIGSTOP')
  await page.waitForSelector('[data-lane="fraud"][data-state="UNRESPONSIVE"]', { timeout: 10_000 })
  t.match(await page.innerText('[data-lane="fraud"] [data-role="why"]'), /^no answer within the deck's deadline; last seen NORMAL, 0 of \d+ permits, \d+ s before$/, 'says it did not answer in time, and where it was last seen')
  t.equal((await tileStates())['card-auth'], 'NORMAL', 'the other lanes are unaffected')
  fraud.kill('SIGCONT')
  await page.waitForSelector('[data-lane="fraud"][data-state="NORMAL"]', { timeout: 10_000 })
  t.pass('back to NORMAL once it answers')
})

t.test('fraud-async MaxWorkers and pause from the page reach the database', async t => {
  const row = page.locator('tr[data-queue="fraud-async"]')
  await row.locator('input.max-workers').fill('4')
  await row.locator('button.save').click()
  t.ok(await eventually(async () => (await dbQueue('fraud-async')).max_workers === 4, 5_000, 50), 'max_workers = 4 in PostgreSQL')
  await page.waitForFunction(() => document.getElementById('queue-msg')!.textContent!.includes('maxWorkers 10 → 4'))
  t.pass('the page says what changed')
  await page.waitForFunction(() => document.querySelector('tr[data-queue="fraud-async"] td:nth-child(3)')!.textContent === '0 / 4')
  t.pass('running / max shows the new limit')

  await row.locator('input.paused').check()
  t.ok(await eventually(async () => (await dbQueue('fraud-async')).paused === true, 5_000, 50), 'paused')
  await row.locator('input.paused').uncheck()
  t.ok(await eventually(async () => (await dbQueue('fraud-async')).paused === false, 5_000, 50), 'resumed')
  t.ok(await eventually(async () => deck.proc.log.some(l => l.includes('"admin change"') && l.includes('"deck-test"') && l.includes('"maxWorkers":4')), 10_000, 50), 'logged with the operator name from the page')
})

t.test('a dead job requeued from the page', async t => {
  await db.query(`insert into jobs.jobs_dead (id, queue, type, payload, priority, attempts, max_attempts, reason, last_error, created_at)
                  values (910001, 'fraud-async', 'fraud.score', '{}', 0, 5, 5, 'max_attempts', '<img src=x onerror="window.pwned=1">', now())`)
  const row = page.locator('tr[data-queue="fraud-async"]')
  await page.waitForFunction(() => document.querySelector('tr[data-queue="fraud-async"] .dead-open')?.textContent === '1')
  await row.locator('.dead-open').click()
  const job = page.locator('#dead-rows tr[data-job="910001"]')
  await job.waitFor()
  t.match(await job.innerText(), /<img src=x/, "the job's last error is shown as text")
  t.equal(await page.locator('#dead-rows img').count(), 0, 'and never as HTML')
  t.equal(await page.evaluate(() => (window as unknown as { pwned?: number }).pwned), undefined, 'no script ran')
  await job.locator('button.requeue').click()
  t.ok(await eventually(async () => (await db.query('select status from jobs.jobs_hot where id = 910001'))[0]?.status === 'pending', 5_000, 50), 'pending again in jobs_hot')
  t.equal((await db.query('select 1 from jobs.jobs_dead where id = 910001')).length, 0, 'gone from jobs_dead')
  await page.waitForFunction(() => !document.querySelector('#dead-rows tr[data-job="910001"]'))
  t.pass('the list no longer shows it')
})

t.test('signing out forgets the token and clears the screen', async t => {
  await page.click('#signout')
  await page.waitForSelector('#login:not([hidden])')
  t.equal(await page.locator('[data-lane]').count(), 0, 'no tiles')
  t.equal(await page.locator('#queue-rows tr').count(), 0, 'no queues')
  t.equal(await page.evaluate(() => sessionStorage.getItem('watertight.deck.token')), null, 'token forgotten')
  await page.reload()
  await page.waitForSelector('#login:not([hidden])')
  t.equal(await page.locator('[data-lane]').count(), 0, 'a reload asks again')
  t.same(pageErrors, [], 'no script errors on the page')
})
