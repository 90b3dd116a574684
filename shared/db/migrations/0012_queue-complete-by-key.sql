-- Up Migration
-- A worker's completions are matched to their rows one index probe each. The
-- delete joined the done list (unnest) to jobs_hot by id, with a second
-- condition, id = any (p_done), for the primary key. Under the generic plan
-- of 0010 the planner scanned the primary key once with that condition and
-- compared every row to every element of the list in a join filter: n²
-- comparisons, the list re-read for each row, which dominates a call with a
-- long done list (EXPLAIN ANALYZE shows it). Without that condition, the plan
-- is a nested loop over the list with one primary-key probe per element; short
-- lists cost the same either way.
-- The function is the same as 0007's apart from that condition, with 0010's
-- settings (CREATE OR REPLACE sets them anew from its own SET clauses).
create or replace function jobs.fetch(
  p_worker text, p_queues text[], p_slots integer[],
  p_done bigint[] default '{}', p_leases uuid[] default '{}', p_results jsonb[] default '{}',
  p_start boolean default true
) returns table (done boolean, id bigint, queue text, type text, status text, payload jsonb, priority integer,
                 attempts integer, max_attempts integer, idempotency_key text, worker_id text, lease uuid)
language plpgsql set search_path = jobs, pg_temp set plan_cache_mode = force_generic_plan set enable_seqscan = off as $$
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
         where h.id = x.id and h.lease = x.lease and h.status || '' = 'processing'
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

-- Down Migration
create or replace function jobs.fetch(
  p_worker text, p_queues text[], p_slots integer[],
  p_done bigint[] default '{}', p_leases uuid[] default '{}', p_results jsonb[] default '{}',
  p_start boolean default true
) returns table (done boolean, id bigint, queue text, type text, status text, payload jsonb, priority integer,
                 attempts integer, max_attempts integer, idempotency_key text, worker_id text, lease uuid)
language plpgsql set search_path = jobs, pg_temp set plan_cache_mode = force_generic_plan set enable_seqscan = off as $$
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
