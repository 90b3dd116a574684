import t from 'tap'
import { containsPan, luhn, panFields } from '../shared/pan.ts'

t.test('Luhn', async t => {
  t.ok(luhn('4111111111111111'))
  t.ok(luhn('378282246310005'))
  t.notOk(luhn('4111111111111112'))
})

t.test('PANs are found in any string, with separators', async t => {
  t.ok(containsPan('4111111111111111'))
  t.ok(containsPan('card 4111-1111-1111-1111 please'))
  t.notOk(containsPan('order 41111111111111110000000'), 'a longer digit run is not a PAN')
  t.ok(containsPan('a 4111111111111111/b'), 'delimited by other characters')
  t.notOk(containsPan('4111111111111112'), 'fails Luhn')
  t.notOk(containsPan('123456789012'), '12 digits is too short')
  t.notOk(containsPan('tok_demo_visa_eur'))
  t.same(panFields({ a: 'x', b: { c: ['y', '5555555555554444'] }, n: 4111111111111111 }), ['/b/c/1'], 'string fields only, with their paths')
})
