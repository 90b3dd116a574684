// Raw card numbers (PANs) are never accepted: any string holding a run of 13-19
// digits (spaces or dashes allowed between them) that passes the Luhn check.
// The number itself is never echoed, stored or logged.

export function luhn (digits: string): boolean {
  let sum = 0
  let double = false
  for (let i = digits.length - 1; i >= 0; i--) {
    let d = digits.charCodeAt(i) - 48
    if (double) { d *= 2; if (d > 9) d -= 9 }
    sum += d
    double = !double
  }
  return sum % 10 === 0
}

// A maximal run of digits, single spaces or dashes allowed between them. Only a
// whole run is checked: testing every 13-19 digit window of a longer run would
// flag most long reference numbers (a random window passes Luhn 1 time in 10).
const RUN = /\d(?:[ -]?\d)*/g

export function containsPan (s: string): boolean {
  for (const m of s.matchAll(RUN)) {
    const digits = m[0].replace(/[ -]/g, '')
    if (digits.length >= 13 && digits.length <= 19 && luhn(digits)) return true
  }
  return false
}

/** JSON paths (e.g. /cardToken) of string fields holding a PAN. */
export function panFields (value: unknown, path = ''): string[] {
  if (typeof value === 'string') return containsPan(value) ? [path || '/'] : []
  if (Array.isArray(value)) return value.flatMap((v, i) => panFields(v, `${path}/${i}`))
  if (value && typeof value === 'object') return Object.entries(value).flatMap(([k, v]) => panFields(v, `${path}/${k}`))
  return []
}
