// Boot-time settings (shared/config.ts): a number or a switch is taken only as
// written plainly. typebox's conversion alone read '1.5' for an integer as 1,
// '0x10' as 16 and '1e1' as 10, so a mistyped limit ran as a different limit.
import t from 'tap'
import { Type } from 'typebox'
import { loadConfig } from '../shared/config.ts'
import { GATEWAY_ENV } from '../gateway/config.ts'

const Schema = Type.Object({
  LIMIT: Type.Integer({ default: 40, minimum: 0, maximum: 1_000 }),
  OFFSET: Type.Optional(Type.Integer({ minimum: -100, maximum: 100 })),
  RATIO: Type.Number({ default: 0.1, minimum: 0, maximum: 1 }),
  ON: Type.Boolean({ default: false }),
  NAME: Type.String({ default: 'x' }),
})

/** The ERR_CONFIG_INVALID list for an environment, or [] when it loads. */
function problems (env: Record<string, string>): string[] {
  try {
    loadConfig(Schema, env)
    return []
  } catch (err) {
    const e = err as { code?: string, extensions?: { errors?: string[] } }
    if (e.code !== 'ERR_CONFIG_INVALID') throw err
    return e.extensions?.errors ?? []
  }
}

t.test('plain values load as written; unset and empty take the default', async t => {
  t.same(loadConfig(Schema, {}), { LIMIT: 40, RATIO: 0.1, ON: false, NAME: 'x' })
  t.same(loadConfig(Schema, { LIMIT: '', RATIO: '' }), { LIMIT: 40, RATIO: 0.1, ON: false, NAME: 'x' })
  t.same(loadConfig(Schema, { LIMIT: '7', OFFSET: '-3', RATIO: '0.25', ON: 'true', NAME: '1e3' }), { LIMIT: 7, OFFSET: -3, RATIO: 0.25, ON: true, NAME: '1e3' })
  t.same(loadConfig(Schema, { RATIO: '1', ON: '1' }), { LIMIT: 40, RATIO: 1, ON: true, NAME: 'x' })
  t.same(loadConfig(Schema, { ON: 'false' }).ON, false)
  t.same(loadConfig(Schema, { ON: '0' }).ON, false)
})

t.test('an integer written any other way stops the process, naming the setting and the value', async t => {
  for (const bad of ['1.5', '1e1', '0x10', ' 5', '5 ', '+3', '.5', '1_000', 'Infinity', 'ten']) {
    const list = problems({ LIMIT: bad })
    t.equal(list.length, 1, `${JSON.stringify(bad)}: one problem, not two for one value (${list.join('; ')})`)
    t.equal(list[0], `LIMIT must be an integer in decimal digits, not ${JSON.stringify(bad)}`)
  }
})

t.test('a decimal number must be digits with an optional fraction; a switch true, false, 1 or 0', async t => {
  for (const bad of ['1e-1', '.5', '0x1', '0.5 ', 'NaN']) t.match(problems({ RATIO: bad }), [`RATIO must be a decimal number such as 0.5, not ${JSON.stringify(bad)}`], bad)
  for (const bad of ['yes', 'on', 'TRUE', '2']) t.match(problems({ ON: bad }), [`ON must be true, false, 1 or 0, not ${JSON.stringify(bad)}`], bad)
})

t.test('every bad setting is listed at once, the written-form problems with the range problems', async t => {
  const list = problems({ LIMIT: '0x10', RATIO: '2', ON: 'yes', OFFSET: '500' })
  t.equal(list.length, 4, list.join('; '))
  t.ok(list.some(p => p.startsWith('LIMIT must be an integer')))
  t.ok(list.some(p => p.startsWith('ON must be true')))
  t.ok(list.some(p => p.startsWith('RATIO ') && !p.includes('decimal')), 'RATIO is written well but out of range')
  t.ok(list.some(p => p.startsWith('OFFSET ')), 'OFFSET out of range')
})

t.test('a real process schema: the gateway refuses a hexadecimal port', async t => {
  t.throws(() => loadConfig(GATEWAY_ENV, { GATEWAY_PORT: '0x1F90' }), { code: 'ERR_CONFIG_INVALID', message: /GATEWAY_PORT must be an integer in decimal digits/ })
  t.equal(loadConfig(GATEWAY_ENV, { GATEWAY_PORT: '8080' }).GATEWAY_PORT, 8080)
})
