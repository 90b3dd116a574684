// @ts-check
// The admin API with the tab's token. The token and the operator's name live in
// sessionStorage only, so they go when the tab closes. A refused token is
// reported to whoever signs out (main.js), so that this module needs no other.

const TOKEN = 'watertight.deck.token'
const OPERATOR = 'watertight.deck.operator'

/** @type {(why: string) => void} */
let refused = () => {}

export class ApiError extends Error {
  /** @param {string} message @param {string | undefined} code @param {number} status */
  constructor (message, code, status) { super(message); this.code = code; this.status = status }
}

/** What to do when the API refuses the token (before the call throws). @param {(why: string) => void} fn */
export function onRefused (fn) { refused = fn }

export const hasToken = () => Boolean(sessionStorage.getItem(TOKEN))

/** @param {string} token @param {string} operator */
export function remember (token, operator) {
  sessionStorage.setItem(TOKEN, token)
  if (operator) sessionStorage.setItem(OPERATOR, operator)
}

export function forget () {
  sessionStorage.removeItem(TOKEN)
  sessionStorage.removeItem(OPERATOR)
}

/** @param {string} method @param {string} path @param {unknown} [body] */
export async function api (method, path, body) {
  /** @type {Record<string, string>} */
  const headers = { authorization: `Bearer ${sessionStorage.getItem(TOKEN) ?? ''}`, accept: 'application/json' }
  const op = sessionStorage.getItem(OPERATOR)
  if (op) headers['x-operator'] = op
  if (body !== undefined) headers['content-type'] = 'application/json'
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store' })
  const json = await res.json().catch(() => null)
  if (res.status === 401) {
    refused('The token was refused.')
    throw new ApiError('unauthenticated', 'ERR_UNAUTHENTICATED', 401)
  }
  if (!res.ok) throw new ApiError(json?.detail ?? `HTTP ${res.status}`, json?.code, res.status)
  return json
}
