// `npm run bench:queue`: job-queue throughput on this machine, with its own
// embedded PostgreSQL. Enqueue jobs/s (jobs.enqueue from 8 connections), then
// claim+start+complete of no-op jobs by 4 concurrent claimers (the worker's own
// library calls) with the queue unlimited and with MaxWorkers on — set to the
// claimers' total slots, so the limit never binds and what is measured is the
// cost of enforcing it (lock the queue row, count, claim). Claim latency p50/p99
// from an HDR histogram.
import crypto from 'node:crypto'
import os from 'node:os'
import { parseArgs } from 'node:util'
import pg from 'pg'
import { bootstrapDatabase, localSecrets } from '../../shared/db/bootstrap.ts'
import { claim } from '../../shared/queue/claim.ts'
import { complete } from '../../shared/queue/complete.ts'
import { start } from '../../shared/queue/start.ts'
import { newHistogram, summary } from './open-loop.ts'

const { values: a } = parseArgs({ options: { jobs: { type: 'string', default: '20000' }, claimers: { type: 'string', default: '4' }, batch: { type: 'string', default: '10' } } })
const N = Number(a.jobs); const claimers = Number(a.claimers); const batch = Number(a.batch)
const command = `npm run bench:queue -- --jobs ${N} --claimers ${claimers} --batch ${batch}`

const dataDir = '.data/bench-queue'
const db = await bootstrapDatabase({ dataDir, port: 18389, database: 'bench', secrets: localSecrets(dataDir), log: m => console.log(m) })
const pool = new pg.Pool({ connectionString: db.superUrl, max: claimers + 8 })
try {
  await pool.query('delete from jobs.jobs_hot; delete from jobs.jobs_archive; delete from jobs.enqueue_keys')
  await pool.query("insert into jobs.queues (name, max_workers) values ('bench', null) on conflict (name) do update set max_workers = null, paused = false, active = true")

  const enqueueAll = async (): Promise<number> => {
    let next = 0
    const t0 = performance.now()
    await Promise.all(Array.from({ length: 8 }, async () => {
      while (next < N) { next++; await pool.query("select jobs.enqueue('bench', 'noop', '{}')") }
    }))
    return N / ((performance.now() - t0) / 1000)
  }
  const drain = async (label: string): Promise<{ label: string, jobsPerSec: number, claim: ReturnType<typeof summary> }> => {
    const h = newHistogram()
    let done = 0
    const t0 = performance.now()
    await Promise.all(Array.from({ length: claimers }, async (_, i) => {
      const workerId = `bench-${i}-${crypto.randomBytes(2).toString('hex')}`
      for (;;) {
        const c = await pool.connect()
        const c0 = performance.now()
        let jobs
        try { jobs = await claim(c, { workerId, slots: { bench: batch } }) } finally { c.release() }
        h.recordValue(Math.max(1, Math.round((performance.now() - c0) * 1000)))
        if (jobs.length === 0) { if (done >= N) return; await new Promise(r => setTimeout(r, 1)); continue }
        await Promise.all(jobs.map(async j => { await start(pool, j.id, j.lease!); await complete(pool, j.id, j.lease!, null) }))
        done += jobs.length
      }
    }))
    return { label, jobsPerSec: N / ((performance.now() - t0) / 1000), claim: summary(h) }
  }

  const enq1 = await enqueueAll()
  const off = await drain('MaxWorkers off (null)')
  await pool.query('update jobs.queues set max_workers = $1 where name = $2', [claimers * batch, 'bench'])
  const enq2 = await enqueueAll()
  const on = await drain(`MaxWorkers on (${claimers * batch})`)
  console.log(`\n${command}`)
  console.log(`${new Date().toISOString()}, ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, node ${process.version}, embedded PostgreSQL 18 on the same machine\n`)
  console.log(`enqueue (jobs.enqueue, 8 connections): ${enq1.toFixed(0)} and ${enq2.toFixed(0)} jobs/s\n`)
  console.log('| claim path | claim+start+complete jobs/s | claim p50 ms | claim p99 ms |\n|---|---|---|---|')
  for (const r of [off, on]) console.log(`| ${r.label} | ${r.jobsPerSec.toFixed(0)} | ${r.claim.p50Ms.toFixed(2)} | ${r.claim.p99Ms.toFixed(2)} |`)
  console.log(`\nenforcing the limit costs ${(100 * (1 - on.jobsPerSec / off.jobsPerSec)).toFixed(1)}% of throughput in this run`)
} finally {
  await pool.end()
  await db.embedded?.stop()
}
