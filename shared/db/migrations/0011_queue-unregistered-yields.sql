-- Up Migration
-- An unregistered claimer of a limited queue (a tool, a test: production
-- workers register) no longer takes the room that the live workers' fair
-- shares are dealt before they have grown into it. It counted each live worker
-- at max(share, active jobs); a registered worker whose share had not grown
-- yet (a new worker, or after a change of the limit deletes every share) could
-- only grow into room that was free under the exclusive lock, and the
-- unregistered claimer, completing and claiming in one transaction, never let
-- any be free, so a registered claimer could be starved of every job
-- (test/serial/queue-hard-limit.test.ts). Now it counts the live workers together at
-- no less than their slots up to max_workers. It only ever counts more than
-- before, so the hard limit's argument (shared/queue/claim.ts) is unchanged.
create or replace function jobs.queue_held(p_queue text, p_worker text, out others_hold integer, out my_active integer)
language sql stable set search_path = jobs, pg_temp as $$
  with act as (
         select h.worker_id, count(*)::int as n from jobs.jobs_hot h
          where h.queue = p_queue and h.status in ('fetched', 'processing') group by h.worker_id),
       live as (
         select w.id, ws.slots from jobs.workers w cross join lateral unnest(w.queues, w.slots) as ws(queue, slots)
          where ws.queue = p_queue and w.expires_at > clock_timestamp()),
       everyone as (
         select coalesce(l.id, a.worker_id) as id, (l.id is not null) as live, coalesce(l.slots, 0) as slots, coalesce(a.n, 0) as active
           from live l full join act a on a.worker_id = l.id),
       held as (
         select coalesce(sum(greatest(coalesce(s.slots, 0), e.active)) filter (where e.live and e.id <> p_worker), 0)::int as live_held,
                coalesce(sum(e.slots) filter (where e.live and e.id <> p_worker), 0)::int as live_slots,
                coalesce(sum(e.active) filter (where not e.live and e.id <> p_worker), 0)::int as other_active,
                coalesce(bool_or(e.live) filter (where e.id = p_worker), false) as registered,
                coalesce(sum(e.active) filter (where e.id = p_worker), 0)::int as mine
           from everyone e left join jobs.shares s on s.queue = p_queue and s.worker_id = e.id)
  select case when h.registered then h.live_held
              -- An unregistered claimer leaves the live workers what they are
              -- dealt (together, their slots up to max_workers), held or not yet.
              else greatest(h.live_held, least(h.live_slots, coalesce((select q.max_workers from jobs.queues q where q.name = p_queue), h.live_slots)))
         end + h.other_active,
         h.mine
    from held h
$$;

-- Down Migration
create or replace function jobs.queue_held(p_queue text, p_worker text, out others_hold integer, out my_active integer)
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
