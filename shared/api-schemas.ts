// Data-plane request schemas, shared by the gateway (validation at the edge) and
// the lanes (defence in depth). Strict: unknown fields are refused.
import { Type, type Static } from 'typebox'

// ISO 4217 codes as the runtime's ICU knows them.
export const CURRENCIES: readonly string[] = Object.freeze(Intl.supportedValuesOf('currency'))

export const MAX_AMOUNT = 10_000_000_000 // 100 million in a 2-decimal currency

export const Money = Type.Object({
  value: Type.Integer({ minimum: 1, maximum: MAX_AMOUNT }),
  currency: Type.String({ enum: [...CURRENCIES] }),
}, { additionalProperties: false })

export const CardToken = Type.String({ pattern: '^tok_[A-Za-z0-9_]{4,60}$' })
export const MerchantId = Type.String({ pattern: '^[A-Za-z0-9_-]{1,64}$' })
export const Country = Type.String({ pattern: '^[A-Z]{2}$' })
// ISO 3166-1 alpha-2, or ISO 3166-2 subdivision (US-TX, CA-QC).
export const Jurisdiction = Type.String({ pattern: '^[A-Z]{2}(-[A-Z0-9]{1,3})?$' })
export const Uuid = Type.String({ format: 'uuid', pattern: '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' })

export const AuthorizationRequest = Type.Object({
  merchantId: MerchantId,
  cardToken: CardToken,
  amount: Money,
}, { additionalProperties: false })
export type AuthorizationRequest = Static<typeof AuthorizationRequest>

export const ScreeningRequest = Type.Object({
  cardToken: CardToken,
  amount: Money,
  merchantId: MerchantId,
  ipCountry: Type.Optional(Country),
  billingCountry: Type.Optional(Country),
}, { additionalProperties: false })
export type ScreeningRequest = Static<typeof ScreeningRequest>

export const TaxQuoteRequest = Type.Object({
  jurisdiction: Jurisdiction,
  amount: Money,
}, { additionalProperties: false })
export type TaxQuoteRequest = Static<typeof TaxQuoteRequest>

export const IdParams = Type.Object({ id: Uuid }, { additionalProperties: false })

// Response shapes, for the OpenAPI document (the gateway forwards lane bytes as they are).
const Timestamp = Type.String({ format: 'date-time' })

export const AuthorizationResponse = Type.Object({
  id: Uuid,
  status: Type.String({ enum: ['approved', 'declined'] }),
  declineReason: Type.Optional(Type.String({ enum: ['insufficient_funds', 'unknown_card', 'card_inactive', 'currency_mismatch'] })),
  amount: Money,
  merchantId: MerchantId,
  cardToken: CardToken,
  createdAt: Timestamp,
})

const Reason = Type.Object({ rule: Type.String(), points: Type.Integer(), detail: Type.String() })
export const ScreeningResponse = Type.Object({
  id: Uuid,
  mode: Type.String({ enum: ['sync', 'async'] }),
  status: Type.String({ enum: ['queued', 'final'] }),
  score: Type.Optional(Type.Integer({ minimum: 0, maximum: 100 })),
  decision: Type.Optional(Type.String({ enum: ['approve', 'review', 'decline'] })),
  reasons: Type.Optional(Type.Array(Reason)),
})

export const TaxQuoteResponse = Type.Object({
  id: Uuid,
  jurisdiction: Jurisdiction,
  rate: Type.Number({ minimum: 0, maximum: 1 }),
  tax: Money,
  total: Money,
  amount: Money,
  source: Type.String({ enum: ['provider', 'compensation'] }),
  tableVersion: Type.Optional(Type.String()),
})

/** RFC 9457 problem details, with the fleet's `code`; extension members allowed. */
export const Problem = Type.Object({
  type: Type.String(),
  title: Type.String(),
  status: Type.Integer(),
  detail: Type.String(),
  instance: Type.String(),
  code: Type.String({ pattern: '^ERR_[A-Z_]+$' }),
}, { additionalProperties: true })
