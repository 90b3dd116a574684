// The gateway's route table (gateway/classify.ts): each POST body schema is
// strict. Which lane a request reaches is tested through the running gateway
// (bad-input, gateway-hostile, gateway-saturation).
import t from 'tap'
import { ROUTES } from '../gateway/classify.ts'

t.test('every POST route has a body schema that refuses unknown fields', async t => {
  for (const r of ROUTES.filter(r => r.method === 'POST')) {
    t.equal((r.body as { additionalProperties?: boolean } | undefined)?.additionalProperties, false, r.url)
  }
})
