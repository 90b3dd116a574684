// The authorization as the API shows it, made from its row: the same answer for
// the first request, every replay and GET /v1/authorizations/:id (the row keeps
// no copy of it: card_auth.authorize writes each authorization once).
export interface AuthorizationRow {
  id: string
  status: 'approved' | 'declined'
  decline_reason: string | null
  merchant_id: string
  card_token: string
  amount: string | number
  currency: string
  created_at: Date
}

export const AUTHORIZATION_COLUMNS = 'id, status, decline_reason, merchant_id, card_token, amount, currency, created_at'

export function authorizationBody (r: AuthorizationRow) {
  return {
    id: r.id,
    status: r.status,
    ...(r.decline_reason ? { declineReason: r.decline_reason } : {}),
    merchantId: r.merchant_id,
    cardToken: r.card_token,
    amount: { value: Number(r.amount), currency: r.currency },
    createdAt: r.created_at.toISOString(),
  }
}
