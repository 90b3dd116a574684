-- Up Migration
-- The job queue in batches (issue 16): one statement enqueues many jobs, one
-- round trip completes a worker's finished jobs and claims (and starts) its next
-- ones. The hard MaxWorkers argument moves from a lock on the queue row to a
-- transaction-scoped advisory lock per queue; shared/queue/claim.ts says why
-- and what it measured.

-- Every claim of a queue holds this lock (exclusive where the queue has a
-- limit, shared where it has none) until its transaction ends; so does every
-- change of a queue row (below), so a claim never runs half under the old
-- settings and half under the new ones. Key space 727003 (the two-int form;
-- the bigint locks of migrate.ts and card_auth.authorize live apart from it).
-- Two queue names with one hash only serialize each other: never unsafe.
create function jobs.queue_lock_id(p_queue text) returns integer
language sql immutable parallel safe as $$ select hashtext(p_queue) $$;

create function jobs.queues_serialize() returns trigger
language plpgsql as $$
begin
  perform pg_advisory_xact_lock(727003, jobs.queue_lock_id(old.name));
  return new;
end $$;
create trigger queues_serialize before update on jobs.queues
  for each row execute function jobs.queues_serialize();

-- The worker processes alive now, with the queues they serve and their local
-- slots for each; a worker refreshes its row with its heartbeat and deletes it
-- when it drains. A limited queue is shared fairly among them (jobs.fetch):
-- without this, the worker that completes a job takes its slot back in the
-- same transaction, and one process keeps a limited queue to itself.
create table jobs.workers (
  id          text primary key,
  queues      text[] not null,
  slots       integer[] not null,
  expires_at  timestamptz not null
);

create function jobs.worker_seen(p_worker text, p_queues text[], p_slots integer[], p_ttl_ms integer) returns void
language sql set search_path = jobs, pg_temp as $$
  insert into jobs.workers (id, queues, slots, expires_at)
  values (p_worker, p_queues, p_slots, clock_timestamp() + make_interval(secs => p_ttl_ms / 1000.0))
  on conflict (id) do update set queues = excluded.queues, slots = excluded.slots, expires_at = excluded.expires_at;
  delete from jobs.workers where expires_at < clock_timestamp() - interval '1 hour';
$$;
revoke all on function jobs.worker_seen from public;

-- Complete a worker's finished jobs, then claim up to p_slots[i] pending jobs
-- of each queue p_queues[i], never more than its MaxWorkers fleet-wide. One
-- call, one transaction when called on its own (autocommit): one commit per
-- batch. Rows come back as done = true (a completion that held its lease: the
-- job is archived) or done = false (a claimed job). p_start folds the start
-- into the claim (status processing, attempt + 1, first heartbeat); without it
-- claimed jobs are only fetched.
-- Each statement below takes a fresh snapshot (a VOLATILE PL/pgSQL function,
-- READ COMMITTED): the count of a limited queue is read after its lock is ours,
-- so it sees every claim committed by the claimer that held the lock before.
create function jobs.fetch(
  p_worker text, p_queues text[], p_slots integer[],
  p_done bigint[] default '{}', p_leases uuid[] default '{}', p_results jsonb[] default '{}',
  p_start boolean default true
) returns table (done boolean, id bigint, queue text, type text, status text, payload jsonb, priority integer,
                 attempts integer, max_attempts integer, idempotency_key text, worker_id text, lease uuid)
language plpgsql set search_path = jobs, pg_temp as $$
#variable_conflict use_column
declare
  q record;
  s record;
  v_free integer;
  v_active integer;
  v_mine integer;
  v_open integer;
  v_others integer;
  v_fair integer;
  v_owed integer;
  v_grant integer;
begin
  if cardinality(p_done) > 0 then
    return query
      with fin as (
        delete from jobs.jobs_hot h using unnest(p_done, p_leases, p_results) as x(id, lease, result)
         where h.id = x.id and h.lease = x.lease and h.status = 'processing'
        returning h.id, h.queue, h.type, h.payload, h.priority, h.attempts, h.idempotency_key, h.worker_id,
                  h.created_at, h.fetched_at, h.started_at, x.result)
      insert into jobs.jobs_archive (id, queue, type, payload, priority, attempts, idempotency_key, worker_id, created_at, fetched_at, started_at, finished_at, result)
      select fin.id, fin.queue, fin.type, fin.payload, fin.priority, fin.attempts, fin.idempotency_key, fin.worker_id,
             fin.created_at, fin.fetched_at, fin.started_at, clock_timestamp(), fin.result from fin
      returning true, jobs_archive.id, jobs_archive.queue, jobs_archive.type, null::text, null::jsonb, null::integer, null::integer, null::integer, null::text, null::text, null::uuid;
  end if;

  -- Lock the queues we may claim from, in name order (two claimers can never
  -- wait for each other in a cycle): exclusive where a limit is set, shared
  -- where none is (unlimited claimers do not wait for each other, but a change
  -- of the queue row waits for them, and they for it).
  for q in
    select n.name, (qs.max_workers is not null) as limited
      from unnest(p_queues, p_slots) as n(name, slots) join jobs.queues qs on qs.name = n.name
     where n.slots > 0 and qs.active and not qs.paused
     order by n.name
  loop
    if q.limited then perform pg_advisory_xact_lock(727003, jobs.queue_lock_id(q.name));
    else perform pg_advisory_xact_lock_shared(727003, jobs.queue_lock_id(q.name));
    end if;
  end loop;

  for q in
    select n.name, n.slots, (qs.max_workers is not null) as limited
      from unnest(p_queues, p_slots) as n(name, slots) join jobs.queues qs on qs.name = n.name
     where n.slots > 0 and qs.active and not qs.paused
     order by n.name
  loop
    -- The queue's settings as of now, under our lock.
    select qs.max_workers, qs.paused, qs.active into s from jobs.queues qs where qs.name = q.name;
    continue when s.paused or not s.active;
    v_free := q.slots;
    if s.max_workers is not null then
      -- Limited since our first look, and we hold only the shared lock: leave
      -- it to the next cycle (the change NOTIFYs jobs_control).
      continue when not q.limited;
      select count(*)::int, (count(*) filter (where h.worker_id = p_worker))::int into v_active, v_mine
        from jobs.jobs_hot h where h.queue = q.name and h.status in ('fetched', 'processing');
      v_open := s.max_workers - v_active;
      -- A fair share for each live worker serving the queue: what the others
      -- are owed (up to their share, less what they hold) is left for them,
      -- unless we are owed too; then we may take what we are owed. Only ever
      -- lowers the claim: the limit rests on v_open alone.
      select count(*)::int into v_others from jobs.workers w
       where w.id <> p_worker and w.expires_at > clock_timestamp() and q.name = any (w.queues);
      if v_others > 0 and v_open > 0 then
        v_fair := ceil(s.max_workers::numeric / (v_others + 1))::int;
        with holders as (
          select h.worker_id, count(*)::int as n from jobs.jobs_hot h
           where h.queue = q.name and h.status in ('fetched', 'processing') group by h.worker_id)
        select coalesce(sum(greatest(0, least(ws.slots, v_fair) - coalesce(hd.n, 0))), 0)::int into v_owed
          from jobs.workers w cross join lateral unnest(w.queues, w.slots) as ws(queue, slots)
          left join holders hd on hd.worker_id = w.id
         where w.id <> p_worker and w.expires_at > clock_timestamp() and ws.queue = q.name;
        v_grant := greatest(v_open - v_owed, least(greatest(0, least(v_mine + q.slots, v_fair) - v_mine), v_open));
        -- Slots left for the others: wake them (they LISTEN on jobs_control).
        if v_owed > 0 and v_grant < v_open then perform pg_notify('jobs_control', q.name); end if;
      else
        v_grant := v_open;
      end if;
      v_free := least(v_free, v_grant);
    end if;
    continue when v_free <= 0;
    return query
      update jobs.jobs_hot h
         set status = case when p_start then 'processing' else 'fetched' end,
             worker_id = p_worker, lease = gen_random_uuid(), fetched_at = clock_timestamp(),
             started_at = case when p_start then clock_timestamp() end,
             heartbeat_at = case when p_start then clock_timestamp() end,
             attempts = h.attempts + case when p_start then 1 else 0 end
       where h.id = any (array(
               select c.id from jobs.jobs_hot c
                where c.queue = q.name and c.status = 'pending' and c.scheduled_at <= now()
                order by c.priority desc, c.scheduled_at, c.id
                limit v_free
                  for update skip locked))
      returning false, h.id, h.queue, h.type, h.status, h.payload, h.priority, h.attempts, h.max_attempts, h.idempotency_key, h.worker_id, h.lease;
  end loop;
end $$;
revoke all on function jobs.fetch from public;

-- Enqueue many jobs of one queue and type in one statement (lanes: through
-- this SECURITY DEFINER function, execute granted by roles.ts like
-- jobs.enqueue). p_idempotency_keys, when given, has one entry per payload
-- (null = no key): a key already taken, in the table or earlier in the same
-- call, returns the first job with created = false, as jobs.enqueue does.
-- Rows come back as (ord, id, created), ord being the 1-based position in
-- p_payloads. One NOTIFY per call, not one per job.
create function jobs.enqueue_many(
  p_queue text, p_type text, p_payloads jsonb[], p_idempotency_keys text[] default null,
  p_priority integer default 0, p_delay_ms integer default 0, p_max_attempts integer default 5
) returns table (ord integer, id bigint, created boolean)
language plpgsql security definer set search_path = jobs, pg_temp as $$
#variable_conflict use_column
declare
  v_at timestamptz := now() + make_interval(secs => greatest(p_delay_ms, 0) / 1000.0);
  v_ords integer[];
  v_ids bigint[];
begin
  if p_idempotency_keys is not null and cardinality(p_idempotency_keys) <> cardinality(p_payloads) then
    raise exception 'jobs.enqueue_many: % idempotency keys for % payloads', cardinality(p_idempotency_keys), cardinality(p_payloads)
      using errcode = '22023';
  end if;
  if p_idempotency_keys is null or cardinality(array_remove(p_idempotency_keys, null)) = 0 then
    -- No keys: one INSERT … SELECT in input order, so identity values follow it.
    return query
      with ins as (
        insert into jobs.jobs_hot (queue, type, payload, status, priority, scheduled_at, max_attempts)
        select p_queue, p_type, coalesce(x.payload, '{}'), 'pending', p_priority, v_at, p_max_attempts
          from unnest(p_payloads) with ordinality as x(payload, ord)
         order by x.ord
        returning jobs_hot.id)
      select (row_number() over (order by ins.id))::int, ins.id, true from ins;
  else
    -- Ids drawn first so a key and its job are written in the same statement;
    -- the first occurrence of a key in the call is the one that may take it.
    with src as (
      select x.ord::int as ord, x.payload, x.key, nextval(pg_get_serial_sequence('jobs.jobs_hot', 'id')) as id
        from unnest(p_payloads, p_idempotency_keys) with ordinality as x(payload, key, ord)),
    won as (
      insert into jobs.enqueue_keys (queue, idempotency_key, job_id)
      select distinct on (src.key) p_queue, src.key, src.id from src where src.key is not null order by src.key, src.ord
      on conflict do nothing
      returning enqueue_keys.job_id),
    ins as (
      insert into jobs.jobs_hot (id, queue, type, payload, status, priority, scheduled_at, max_attempts, idempotency_key)
        overriding system value
      select src.id, p_queue, p_type, coalesce(src.payload, '{}'), 'pending', p_priority, v_at, p_max_attempts, src.key
        from src where src.key is null or src.id in (select won.job_id from won)
       order by src.ord
      returning jobs_hot.id)
    select array_agg(src.ord), array_agg(src.id) into v_ords, v_ids from src join ins on ins.id = src.id;
    return query select c.ord, c.id, true from unnest(v_ords, v_ids) as c(ord, id);
    -- The others: their key was taken (earlier in this call, or by another
    -- call that committed first). A fresh statement, so that one is visible.
    return query
      select x.ord::int, k.job_id, false
        from unnest(p_idempotency_keys) with ordinality as x(key, ord)
        join jobs.enqueue_keys k on k.queue = p_queue and k.idempotency_key = x.key
        left join unnest(v_ords) as c(ord) on c.ord = x.ord
       where c.ord is null;
    if coalesce(cardinality(v_ords), 0) = 0 then return; end if;
  end if;
  perform pg_notify('jobs_enqueued', p_queue);
end $$;
revoke all on function jobs.enqueue_many from public;

-- Down Migration
drop function jobs.enqueue_many;
drop function jobs.fetch;
drop function jobs.worker_seen;
drop table jobs.workers;
drop trigger queues_serialize on jobs.queues;
drop function jobs.queues_serialize;
drop function jobs.queue_lock_id;
