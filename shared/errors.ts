// The one error registry of the fleet. Every error a client, an operator or a
// tool can see has a stable ERR_* code here; docs/api.md's error table lists the same codes
// and test/error-registry-docs.test.ts fails when the two drift apart.
// Recognise these with isAppError() and branch on their `code`, never on
// `instanceof AppError`: the code is what clients and the docs hold us to.
// Internal errors that never leave a process (BulkheadRejected, PoolReplaced,
// StoreUnavailable) are not in the registry and are matched by class.

export interface ErrorSpec {
  readonly status: number
  readonly title: string
  /** Problem type slug; the IETF RateLimit draft fixes two of them. */
  readonly type?: string
  /** Seconds for Retry-After, when the status asks the client to come back. */
  readonly retryAfter?: number
}

export const ERRORS = Object.freeze({
  ERR_UNAUTHENTICATED: { status: 401, title: 'Missing or invalid credentials' },
  ERR_IDEMPOTENCY_KEY_REQUIRED: { status: 400, title: 'Idempotency-Key header is required on POST' },
  ERR_IDEMPOTENCY_KEY_REUSED: { status: 422, title: 'Idempotency-Key was used with a different request body' },
  ERR_IDEMPOTENCY_IN_PROGRESS: { status: 409, title: 'A request with this Idempotency-Key is still being processed', retryAfter: 1 },
  ERR_VALIDATION: { status: 400, title: 'Request failed validation' },
  ERR_MALFORMED_JSON: { status: 400, title: 'Request body is not valid JSON' },
  ERR_PAYLOAD_TOO_LARGE: { status: 413, title: 'Request body is too large' },
  ERR_UNSUPPORTED_MEDIA_TYPE: { status: 415, title: 'Content-Type must be application/json' },
  ERR_PAN_NOT_ACCEPTED: { status: 422, title: 'Raw card numbers are not accepted; send a card token' },
  ERR_NOT_FOUND: { status: 404, title: 'Resource not found' },
  ERR_CARD_AUTH_SATURATED: { status: 429, title: 'Card authorization lane is saturated', type: 'quota-exceeded', retryAfter: 1 },
  ERR_FRAUD_SATURATED: { status: 503, title: 'Fraud lane is saturated and the async queue is unavailable', type: 'temporary-reduced-capacity', retryAfter: 5 },
  ERR_TAX_BULKHEAD_SATURATED: { status: 503, title: 'Tax lane is saturated and no certified rate exists for the jurisdiction', type: 'temporary-reduced-capacity', retryAfter: 5 },
  ERR_UNTESTED_COMPENSATION_REJECTED: { status: 503, title: 'Compensation rate is not certified', retryAfter: 5 },
  ERR_TAX_PROVIDER_FAILED: { status: 503, title: 'Tax provider failed and no certified compensation is available', retryAfter: 5 },
  ERR_UNKNOWN_JURISDICTION: { status: 422, title: 'Unknown tax jurisdiction' },
  ERR_LANE_OVERLOADED: { status: 503, title: 'Lane process is under pressure', type: 'temporary-reduced-capacity', retryAfter: 5 },
  ERR_GATEWAY_OVERLOADED: { status: 503, title: 'Gateway process is under pressure', type: 'temporary-reduced-capacity', retryAfter: 1 },
  ERR_LANE_UNAVAILABLE: { status: 503, title: 'Lane is unreachable', retryAfter: 5 },
  ERR_LANE_ANSWER_TOO_LARGE: { status: 502, title: 'Lane answered with more than the gateway forwards' },
  ERR_DEADLINE_EXCEEDED: { status: 504, title: 'Execution exceeded the lane deadline' },
  ERR_RETRY_STORM_BLOCKED: { status: 429, title: 'Too many retries of one Idempotency-Key, or over the client retry budget', type: 'quota-exceeded', retryAfter: 5 },
  ERR_CLIENT_RATE_LIMITED: { status: 429, title: 'Client request rate limit exceeded', type: 'quota-exceeded', retryAfter: 1 },
  ERR_HEADERS_TOO_LARGE: { status: 431, title: 'Request header fields too large' },
  ERR_SHUTTING_DOWN: { status: 503, title: 'Process is draining for shutdown', retryAfter: 1 },
  ERR_CONFIG_INVALID: { status: 500, title: 'Configuration is invalid' },
  // A failed start's one line (shared/start-failure.ts), never an HTTP answer.
  ERR_DB_ROLE_LIMIT_REACHED: { status: 500, title: 'The role\'s CONNECTION LIMIT stayed full for the whole start budget' },
  ERR_DB_UNREACHABLE: { status: 500, title: 'The database was unreachable for the whole start budget' },
  ERR_DB_AUTH_FAILED: { status: 500, title: 'PostgreSQL refused the role\'s password' },
  ERR_PORT_IN_USE: { status: 500, title: 'The process\'s listen port is taken' },
  ERR_QUEUE_NOT_FOUND: { status: 404, title: 'No job queue of that name' },
  ERR_FAULT_INJECTION_DISABLED: { status: 404, title: 'Fault injection is off: this deck has no tax sandbox (local runs only)' },
  ERR_SANDBOX_UNAVAILABLE: { status: 502, title: 'The tax sandbox did not answer', retryAfter: 1 },
  ERR_INTERNAL: { status: 500, title: 'Internal error' },
} satisfies Record<string, ErrorSpec>)

export type ErrorCode = keyof typeof ERRORS

export interface AppErrorOptions {
  detail?: string
  headers?: Record<string, string>
  /** Extra problem members, e.g. `violated-policies` or validation `errors`. */
  extensions?: Record<string, unknown>
  cause?: unknown
}

export class AppError extends Error {
  readonly code: ErrorCode
  readonly status: number
  readonly detail: string
  readonly headers: Record<string, string>
  readonly extensions: Record<string, unknown>

  constructor (code: ErrorCode, opts: AppErrorOptions = {}) {
    const spec: ErrorSpec = ERRORS[code]
    super(opts.detail ?? spec.title, { cause: opts.cause })
    this.name = 'AppError'
    this.code = code
    this.status = spec.status
    this.detail = opts.detail ?? spec.title
    this.headers = { ...(spec.retryAfter !== undefined ? { 'retry-after': String(spec.retryAfter) } : {}), ...opts.headers }
    this.extensions = opts.extensions ?? {}
  }
}

export function isAppError (err: unknown): err is AppError {
  return typeof err === 'object' && err !== null && typeof (err as { code?: unknown }).code === 'string' &&
    Object.hasOwn(ERRORS, (err as { code: string }).code) && (err as { name?: unknown }).name === 'AppError'
}
