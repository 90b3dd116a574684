-- Up Migration
-- The job queue with database-level bulkheads (the ChokaQ model, on PostgreSQL).
-- Three tables of jobs ("three pillars"): jobs_hot holds only pending, fetched and
-- processing jobs, so the per-queue active count in the claim stays bounded by
-- active work, not history; succeeded jobs move to jobs_archive, failed ones to
-- jobs_dead.
create table jobs.queues (
  name                    text primary key check (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
  max_workers             integer check (max_workers is null or max_workers >= 0),
  paused                  boolean not null default false,
  active                  boolean not null default true,
  zombie_timeout_seconds  integer not null default 60 check (zombie_timeout_seconds between 1 and 86400),
  updated_at              timestamptz not null default now()
);

insert into jobs.queues (name, max_workers) values ('fraud-async', 10), ('tax-reconcile', 3);

create table jobs.jobs_hot (
  id               bigint generated always as identity primary key,
  queue            text not null references jobs.queues (name),
  type             text not null check (type ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
  payload          jsonb not null default '{}',
  status           text not null check (status in ('pending', 'fetched', 'processing')),
  priority         integer not null default 0,
  scheduled_at     timestamptz not null default now(),
  created_at       timestamptz not null default now(),
  attempts         integer not null default 0,
  max_attempts     integer not null default 5 check (max_attempts between 1 and 100),
  idempotency_key  text,
  worker_id        text,
  lease            uuid,
  fetched_at       timestamptz,
  started_at       timestamptz,
  heartbeat_at     timestamptz,
  last_error       text,
  check ((status = 'pending') = (lease is null))
);
-- The claim reads the best pending candidates of one queue …
create index jobs_hot_claim on jobs.jobs_hot (queue, priority desc, scheduled_at, id) where status = 'pending';
-- … and counts that queue's active jobs.
create index jobs_hot_active on jobs.jobs_hot (queue, status) where status in ('fetched', 'processing');

create table jobs.jobs_archive (
  id               bigint primary key,
  queue            text not null,
  type             text not null,
  payload          jsonb not null,
  priority         integer not null,
  attempts         integer not null,
  idempotency_key  text,
  worker_id        text,
  created_at       timestamptz not null,
  fetched_at       timestamptz,
  started_at       timestamptz,
  finished_at      timestamptz not null,
  result           jsonb
);
create index jobs_archive_queue_time on jobs.jobs_archive (queue, finished_at);

create table jobs.jobs_dead (
  id               bigint primary key,
  queue            text not null,
  type             text not null,
  payload          jsonb not null,
  priority         integer not null,
  attempts         integer not null,
  max_attempts     integer not null,
  idempotency_key  text,
  reason           text not null check (reason in ('max_attempts', 'zombie', 'fatal')),
  last_error       text,
  created_at       timestamptz not null,
  died_at          timestamptz not null default now()
);
create index jobs_dead_queue_time on jobs.jobs_dead (queue, died_at);

-- An enqueue idempotency key stays taken after the job leaves jobs_hot.
create table jobs.enqueue_keys (
  queue            text not null,
  idempotency_key  text not null,
  job_id           bigint not null,
  created_at       timestamptz not null default now(),
  primary key (queue, idempotency_key)
);

-- Lanes enqueue through this one function (SECURITY DEFINER, execute granted to
-- lane roles by roles.ts), never with rights on the queue tables at large.
create function jobs.enqueue(
  p_queue text, p_type text, p_payload jsonb, p_priority integer default 0,
  p_delay_ms integer default 0, p_max_attempts integer default 5, p_idempotency_key text default null
) returns table (id bigint, created boolean)
language plpgsql security definer set search_path = jobs, pg_temp as $$
declare v_id bigint;
begin
  if p_idempotency_key is not null then
    select k.job_id into v_id from jobs.enqueue_keys k where k.queue = p_queue and k.idempotency_key = p_idempotency_key;
    if found then return query select v_id, false; return; end if;
  end if;
  insert into jobs.jobs_hot (queue, type, payload, status, priority, scheduled_at, max_attempts, idempotency_key)
  values (p_queue, p_type, coalesce(p_payload, '{}'), 'pending', p_priority, now() + make_interval(secs => greatest(p_delay_ms, 0) / 1000.0), p_max_attempts, p_idempotency_key)
  returning jobs_hot.id into v_id;
  if p_idempotency_key is not null then
    insert into jobs.enqueue_keys (queue, idempotency_key, job_id) values (p_queue, p_idempotency_key, v_id)
    on conflict do nothing;
    if not found then
      -- A concurrent enqueue took the key first: drop ours, return theirs.
      delete from jobs.jobs_hot where jobs_hot.id = v_id;
      select k.job_id into v_id from jobs.enqueue_keys k where k.queue = p_queue and k.idempotency_key = p_idempotency_key;
      return query select v_id, false; return;
    end if;
  end if;
  perform pg_notify('jobs_enqueued', p_queue);
  return query select v_id, true;
end $$;
revoke all on function jobs.enqueue from public;

-- Down Migration
drop function jobs.enqueue;
drop table jobs.enqueue_keys;
drop table jobs.jobs_dead;
drop table jobs.jobs_archive;
drop table jobs.jobs_hot;
drop table jobs.queues;
