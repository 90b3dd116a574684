import t from 'tap'
import { classify, ROUTES } from '../gateway/classify.ts'

t.test('each data-plane route goes to the lane that owns it', async t => {
  t.equal(classify('POST', '/v1/authorizations')?.lane, 'card-auth')
  t.equal(classify('GET', '/v1/authorizations/0b7e4e0e-2b4c-4a39-9f3e-1f2a3b4c5d6e')?.lane, 'card-auth')
  t.equal(classify('POST', '/v1/fraud/screenings')?.lane, 'fraud')
  t.equal(classify('GET', '/v1/fraud/screenings/abc')?.url, '/v1/fraud/screenings/:id')
  t.equal(classify('POST', '/v1/tax/quotes?x=1')?.lane, 'tax')
  t.equal(classify('GET', '/v1/tax/quotes/abc')?.lane, 'tax')
})

t.test('nothing else is classified', async t => {
  for (const [m, p] of [['GET', '/v1/authorizations'], ['DELETE', '/v1/authorizations/x'], ['POST', '/v1/tax'], ['GET', '/admin/lanes'], ['POST', '/v1/authorizations/x/y'], ['GET', '/']]) {
    t.equal(classify(m!, p!), undefined, `${m} ${p}`)
  }
})

t.test('every POST route has a body schema that refuses unknown fields', async t => {
  for (const r of ROUTES.filter(r => r.method === 'POST')) {
    t.equal((r.body as { additionalProperties?: boolean } | undefined)?.additionalProperties, false, r.url)
  }
})
