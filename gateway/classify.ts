// The data-plane route table: for each (method, route template) the lane that
// owns it, its body schema and its answer. gateway/proxy.ts registers one Fastify
// route per entry, so Fastify's router is the classifier; the template is the
// metric label.
import type { TSchema } from 'typebox'
import { AuthorizationRequest, AuthorizationResponse, ScreeningRequest, ScreeningResponse, TaxQuoteRequest, TaxQuoteResponse } from '../shared/api-schemas.ts'
import type { LaneName } from '../shared/lanes.ts'

export interface RouteSpec {
  readonly method: 'GET' | 'POST'
  /** Fastify route template, also the metric label. */
  readonly url: string
  readonly lane: LaneName
  readonly body?: TSchema
  readonly summary: string
  readonly success: { readonly status: number, readonly schema: TSchema }
}

export const ROUTES: readonly RouteSpec[] = Object.freeze([
  { method: 'POST', url: '/v1/authorizations', lane: 'card-auth', body: AuthorizationRequest, summary: 'Authorize a card payment: a hold on available funds, exactly once per Idempotency-Key', success: { status: 201, schema: AuthorizationResponse } },
  { method: 'GET', url: '/v1/authorizations/:id', lane: 'card-auth', summary: 'Read an authorization', success: { status: 200, schema: AuthorizationResponse } },
  { method: 'POST', url: '/v1/fraud/screenings', lane: 'fraud', body: ScreeningRequest, summary: 'Screen a payment for fraud', success: { status: 200, schema: ScreeningResponse } },
  { method: 'GET', url: '/v1/fraud/screenings/:id', lane: 'fraud', summary: 'Read a screening', success: { status: 200, schema: ScreeningResponse } },
  { method: 'POST', url: '/v1/tax/quotes', lane: 'tax', body: TaxQuoteRequest, summary: 'Quote tax for an amount in a jurisdiction', success: { status: 200, schema: TaxQuoteResponse } },
  { method: 'GET', url: '/v1/tax/quotes/:id', lane: 'tax', summary: 'Read a tax quote', success: { status: 200, schema: TaxQuoteResponse } },
] satisfies RouteSpec[])
