// The log formats every process takes (LOG_FORMAT), apart from shared/http-app.ts
// so the supervisor can check its children's setting without loading Fastify.
export const LOG_FORMATS = ['json', 'pretty'] as const
