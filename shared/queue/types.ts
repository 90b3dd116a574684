// Row shapes of the job queue (shared/db/migrations/0005_jobs.sql).
import type pg from 'pg'

export type Db = pg.Pool | pg.PoolClient | pg.Client

export interface Job {
  id: string
  queue: string
  type: string
  payload: Record<string, unknown>
  status: 'pending' | 'fetched' | 'processing'
  priority: number
  attempts: number
  max_attempts: number
  idempotency_key: string | null
  worker_id: string | null
  lease: string | null
}

export interface QueueRow {
  name: string
  max_workers: number | null
  paused: boolean
  active: boolean
  zombie_timeout_seconds: number
  updated_at: string
}
