// Row ids: UUID version 7 (RFC 9562): 48 bits of Unix time in milliseconds first,
// then 74 random bits. Ids made one after the other sort one after the other, so
// each new row's primary-key entry goes to the right-hand edge of its index, on
// a page already in memory, instead of a random leaf of the whole index: with
// random (version 4) ids, a table of authorizations larger than PostgreSQL's
// shared buffers made most inserts read a leaf page back from the OS and write a
// full-page image of it to the WAL after each checkpoint.
// The random part comes from crypto.randomUUID (Node's batched entropy), whose
// first 48 bits and version nibble are replaced: several times cheaper than the
// `uuid` package's v7, which makes a getRandomValues call per id.
import crypto from 'node:crypto'

/** A new UUIDv7: `tttttttt-tttt-7rrr-vrrr-rrrrrrrrrrrr`. */
export function newId (now = Date.now()): string {
  const t = now.toString(16).padStart(12, '0')
  return `${t.slice(0, 8)}-${t.slice(8, 12)}-7${crypto.randomUUID().slice(15)}`
}
