// The deck's environment, validated at boot (main.ts); docs/operations.md "Deck"
// lists it, held to it by test/config-docs.test.ts.
import { Type } from 'typebox'
import { LEAK_DETECTION_DEFAULT_MS } from '../../shared/db/leak-detection.ts'

const Url = Type.String({ pattern: '^https?://[^\\s/]+$' })
export const DECK_ENV = Type.Object({
  DECK_PORT: Type.Integer({ default: 9090, minimum: 0, maximum: 65535 }),
  // Loopback by default: the admin plane is never on the data-plane's interface.
  DECK_HOST: Type.String({ default: '127.0.0.1' }),
  ADMIN_TOKEN: Type.String({ minLength: 16, maxLength: 512, pattern: '^\\S+$' }),
  DATABASE_URL: Type.String({ minLength: 1, description: 'connection string with the deck role' }),
  CARD_AUTH_URL: Type.Optional(Url),
  FRAUD_URL: Type.Optional(Url),
  TAX_URL: Type.Optional(Url),
  GATEWAY_URL: Type.Optional(Url),
  /** name=url pairs, comma separated: worker-fraud=http://127.0.0.1:8104,... */
  WORKER_URLS: Type.String({ default: '', pattern: '^([a-z0-9-]+=https?://[^\\s,/]+)?(,[a-z0-9-]+=https?://[^\\s,/]+)*$' }),
  /** Set only for local and demo runs: enables PUT /admin/faults/tax. */
  TAX_SANDBOX_URL: Type.Optional(Url),
  // The page refreshes at least every 2 s (issue 8); the poll must fit inside that.
  DECK_POLL_MS: Type.Integer({ default: 1_000, minimum: 100, maximum: 2_000 }),
  DECK_TARGET_TIMEOUT_MS: Type.Integer({ default: 500, minimum: 50, maximum: 2_000 }),
  // DEC-BH-01 on the deck's pool; 0 = off.
  DECK_LEAK_DETECTION_MS: Type.Integer({ default: LEAK_DETECTION_DEFAULT_MS, minimum: 0, maximum: 600_000 }),
  DECK_HISTORY_SECONDS: Type.Integer({ default: 600, minimum: 60, maximum: 86_400 }),
})
