-- Up Migration
-- The job queue in batches (issue 16): one statement enqueues many jobs, one
-- round trip completes a worker's finished jobs and claims (and starts) its next
-- ones. The hard MaxWorkers argument moves from a lock on the queue row to a
-- transaction-scoped advisory lock per queue; shared/queue/claim.ts says why
-- and what it measured.

-- Every claim of a queue holds this lock until its transaction ends: shared
-- on the fast path, exclusive where a claim must see every other claim (an
-- unregistered claimer, or a worker growing its share of a limited queue); so
-- does every change of a queue row, exclusive (the trigger below), so a claim
-- never runs half under the old settings and half under the new ones. Key
-- space 727003 (the two-int form; the bigint locks of migrate.ts and
-- card_auth.authorize live apart from it). Two queue names with one hash only
-- serialize each other: never unsafe.
create function jobs.queue_lock_id(p_queue text) returns integer
language sql immutable parallel safe as $$ select hashtext(p_queue) $$;

-- The worker processes alive now, with the queues they serve and their local
-- slots for each; a worker refreshes its row with its heartbeat and deletes it
-- (and its shares) when it drains.
create table jobs.workers (
  id          text primary key,
  queues      text[] not null,
  slots       integer[] not null,
  expires_at  timestamptz not null
);

-- Each live worker's share of a limited queue: it claims on its own within its
-- share (active jobs of its own <= slots), and the shares of a queue, with the
-- active jobs of anyone without one, never add up to more than max_workers
-- (shared/queue/claim.ts has the argument).
create table jobs.shares (
  queue      text not null references jobs.queues (name) on delete cascade,
  worker_id  text not null,
  slots      integer not null check (slots >= 0),
  primary key (queue, worker_id)
);

create function jobs.queues_serialize() returns trigger
language plpgsql as $$
begin
  perform pg_advisory_xact_lock(727003, jobs.queue_lock_id(old.name));
  -- A new limit: every share is handed back and grown again under it.
  if new.max_workers is distinct from old.max_workers then
    delete from jobs.shares where queue = old.name;
  end if;
  return new;
end $$;
create trigger queues_serialize before update on jobs.queues
  for each row execute function jobs.queues_serialize();

create function jobs.worker_seen(p_worker text, p_queues text[], p_slots integer[], p_ttl_ms integer) returns void
language sql set search_path = jobs, pg_temp as $$
  insert into jobs.workers (id, queues, slots, expires_at)
  values (p_worker, p_queues, p_slots, clock_timestamp() + make_interval(secs => p_ttl_ms / 1000.0))
  on conflict (id) do update set queues = excluded.queues, slots = excluded.slots, expires_at = excluded.expires_at;
  delete from jobs.workers where expires_at < clock_timestamp() - interval '1 hour';
$$;
revoke all on function jobs.worker_seen from public;

create function jobs.worker_gone(p_worker text) returns void
language sql set search_path = jobs, pg_temp as $$
  delete from jobs.shares where worker_id = p_worker;
  delete from jobs.workers where id = p_worker;
$$;
revoke all on function jobs.worker_gone from public;

-- A worker's fair share of a limited queue: max_workers dealt out among the
-- live workers serving it, fewest local slots first (each gets at most its
-- slots and at most an even split of what is left), ties by id, so every
-- worker computes the same deal. registered = false: p_worker is not one of
-- them (share is null).
create function jobs.fair_share(p_queue text, p_worker text, p_max integer, out registered boolean, out share integer)
language plpgsql stable set search_path = jobs, pg_temp as $$
declare
  r record;
  v_left integer := p_max;
  v_n integer;
  v_s integer;
begin
  registered := false;
  select count(*)::int into v_n from jobs.workers w where w.expires_at > clock_timestamp() and p_queue = any (w.queues);
  for r in
    select w.id, ws.slots from jobs.workers w cross join lateral unnest(w.queues, w.slots) as ws(queue, slots)
     where ws.queue = p_queue and w.expires_at > clock_timestamp() order by ws.slots, w.id
  loop
    v_s := greatest(0, least(r.slots, ceil(v_left::numeric / v_n)::int));
    if r.id = p_worker then registered := true; share := v_s; return; end if;
    v_left := v_left - v_s; v_n := v_n - 1;
  end loop;
end $$;
revoke all on function jobs.fair_share from public;

-- What everyone but p_worker holds of a limited queue (a live worker: the
-- larger of its share and its active jobs; anyone else: its active jobs), and
-- p_worker's own active jobs.
create function jobs.queue_held(p_queue text, p_worker text, out others_hold integer, out my_active integer)
language sql stable set search_path = jobs, pg_temp as $$
  with act as (
         select h.worker_id, count(*)::int as n from jobs.jobs_hot h
          where h.queue = p_queue and h.status in ('fetched', 'processing') group by h.worker_id),
       live as (
         select w.id from jobs.workers w where w.expires_at > clock_timestamp() and p_queue = any (w.queues)),
       everyone as (
         select coalesce(l.id, a.worker_id) as id, (l.id is not null) as live, coalesce(a.n, 0) as active
           from live l full join act a on a.worker_id = l.id)
  select coalesce(sum(greatest(case when e.live then coalesce(s.slots, 0) else 0 end, e.active)) filter (where e.id <> p_worker), 0)::int,
         coalesce(sum(e.active) filter (where e.id = p_worker), 0)::int
    from everyone e left join jobs.shares s on s.queue = p_queue and s.worker_id = e.id
$$;
revoke all on function jobs.queue_held from public;

-- Complete a worker's finished jobs, then claim up to p_slots[i] pending jobs
-- of each queue p_queues[i], never more than its MaxWorkers fleet-wide. One
-- call, one transaction when called on its own (autocommit): one commit per
-- batch. Rows come back as done = true (a completion that held its lease: the
-- job is archived) or done = false (a claimed job). p_start folds the start
-- into the claim (status processing, attempt + 1, first heartbeat); without it
-- claimed jobs are only fetched.
-- Each statement below takes a fresh snapshot (a VOLATILE PL/pgSQL function,
-- READ COMMITTED), so whatever it reads after a lock is ours includes every
-- claim committed by those that held the lock before.
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
  fs record;
  held record;
  v_names text[] := '{}';
  v_slots integer[] := '{}';
  v_excl boolean[] := '{}';
  v_fair integer[] := '{}';
  v_share integer;
  v_mine integer;
  v_target integer;
  v_free integer;
  i integer;
begin
  if cardinality(p_done) > 0 then
    return query
      with fin as (
        delete from jobs.jobs_hot h using unnest(p_done, p_leases, p_results) as x(id, lease, result)
         -- By key. (status || '', not status: with statistics taken when no job
         -- was active, the planner would scan the whole partial index of active
         -- jobs, once per call, instead.)
         where h.id = any (p_done) and h.id = x.id and h.lease = x.lease and h.status || '' = 'processing'
        returning h.id, h.queue, h.type, h.payload, h.priority, h.attempts, h.idempotency_key, h.worker_id,
                  h.created_at, h.fetched_at, h.started_at, x.result)
      insert into jobs.jobs_archive (id, queue, type, payload, priority, attempts, idempotency_key, worker_id, created_at, fetched_at, started_at, finished_at, result)
      select fin.id, fin.queue, fin.type, fin.payload, fin.priority, fin.attempts, fin.idempotency_key, fin.worker_id,
             fin.created_at, fin.fetched_at, fin.started_at, clock_timestamp(), fin.result from fin
      returning true, jobs_archive.id, jobs_archive.queue, jobs_archive.type, null::text, null::jsonb, null::integer, null::integer, null::integer, null::text, null::text, null::uuid;
  end if;

  -- A first look, without locks: which queues have due jobs for us, and which
  -- lock each needs. Exclusive where the claim must see every other claim: an
  -- unregistered claimer of a limited queue, or a worker whose share is below
  -- its fair share (it grows); shared otherwise.
  for q in
    select n.name, n.slots, qs.max_workers
      from unnest(p_queues, p_slots) as n(name, slots) join jobs.queues qs on qs.name = n.name
     where n.slots > 0 and qs.active and not qs.paused
       and exists (select 1 from jobs.jobs_hot c where c.queue = n.name and c.status = 'pending' and c.scheduled_at <= now())
     order by n.name
  loop
    v_names := v_names || q.name; v_slots := v_slots || q.slots;
    if q.max_workers is null then v_excl := v_excl || false; v_fair := v_fair || 0;
    else
      fs := jobs.fair_share(q.name, p_worker, q.max_workers);
      select sh.slots into v_share from jobs.shares sh where sh.queue = q.name and sh.worker_id = p_worker;
      v_fair := v_fair || coalesce(fs.share, 0);
      v_excl := v_excl || (not fs.registered or coalesce(v_share, -1) < fs.share);
    end if;
  end loop;
  -- Locks in name order: two claimers never wait for each other in a cycle.
  for i in 1 .. cardinality(v_names) loop
    if v_excl[i] then perform pg_advisory_xact_lock(727003, jobs.queue_lock_id(v_names[i]));
    else perform pg_advisory_xact_lock_shared(727003, jobs.queue_lock_id(v_names[i]));
    end if;
  end loop;

  for i in 1 .. cardinality(v_names) loop
    -- The queue's settings as of now, under our lock.
    select qs.max_workers, qs.paused, qs.active into s from jobs.queues qs where qs.name = v_names[i];
    continue when s.paused or not s.active;
    v_free := v_slots[i];
    if s.max_workers is not null then
      if v_excl[i] then
        -- Everyone else's claims are committed and counted. The share of a
        -- worker no longer live is handed back (its active jobs still count).
        delete from jobs.shares sh where sh.queue = v_names[i] and sh.worker_id <> p_worker
           and not exists (select 1 from jobs.workers w where w.id = sh.worker_id and w.expires_at > clock_timestamp() and v_names[i] = any (w.queues));
        held := jobs.queue_held(v_names[i], p_worker);
        fs := jobs.fair_share(v_names[i], p_worker, s.max_workers);
        if fs.registered then
          -- Our share: our fair share, as far as what the others hold allows.
          v_target := greatest(0, least(fs.share, s.max_workers - held.others_hold));
          insert into jobs.shares as sh (queue, worker_id, slots) values (v_names[i], p_worker, v_target)
          on conflict (queue, worker_id) do update set slots = excluded.slots;
          v_free := least(v_free, v_target - held.my_active);
        else
          v_free := least(v_free, s.max_workers - held.others_hold - held.my_active);
        end if;
      else
        -- Within our own share, claimed alone: one claim of ours at a time per queue.
        perform pg_advisory_xact_lock(hashtextextended(v_names[i] || chr(31) || p_worker, 727004));
        select sh.slots into v_share from jobs.shares sh where sh.queue = v_names[i] and sh.worker_id = p_worker;
        -- No share (handed back meanwhile): the next cycle asks for one.
        continue when v_share is null;
        if v_share > v_fair[i] then
          -- More workers now: give back what we hold above our fair share, and
          -- wake them (they LISTEN on jobs_control) to take it once it is free.
          v_share := v_fair[i];
          update jobs.shares sh set slots = v_share where sh.queue = v_names[i] and sh.worker_id = p_worker;
          perform pg_notify('jobs_control', v_names[i]);
        end if;
        select count(*)::int into v_mine from jobs.jobs_hot h
         where h.queue = v_names[i] and h.status in ('fetched', 'processing') and h.worker_id = p_worker;
        v_free := least(v_free, v_share - v_mine);
      end if;
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
                where c.queue = v_names[i] and c.status = 'pending' and c.scheduled_at <= now()
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
  if coalesce(cardinality(p_payloads), 0) = 0 then return; end if;
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
drop function jobs.queue_held;
drop function jobs.fair_share;
drop function jobs.worker_gone;
drop function jobs.worker_seen;
drop table jobs.shares;
drop table jobs.workers;
drop trigger queues_serialize on jobs.queues;
drop function jobs.queues_serialize;
drop function jobs.queue_lock_id;
