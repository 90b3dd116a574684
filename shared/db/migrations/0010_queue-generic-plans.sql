-- Up Migration
-- The queue's claim functions plan their statements once per connection, not
-- once per call (issue 16: at MaxWorkers 10 a worker completes and claims
-- about 5 jobs per jobs.fetch call, so what each call costs PostgreSQL bounds
-- the queue's throughput under the limit). PL/pgSQL caches each statement's
-- plan, but for a statement with parameters it plans anew with each call's
-- values for as long as it judges that cheaper than a generic plan, and for
-- the claim it kept judging so.
-- A generic plan is made once, with the statistics of that moment: a worker
-- that started on an empty queue would keep a sequential scan of jobs_hot
-- however long the queue grew. With sequential scans off inside these
-- functions, the plans are the index scans whatever the table's size then
-- (jobs_hot_claim, jobs_hot_active, the primary keys; checked with auto_explain
-- on a 200-row table); jobs.workers, with no index to use, is still scanned.
-- Measured: one connection completing and claiming 5 no-op jobs per call
-- (2,001 calls, a queue at MaxWorkers 10, CPU from /proc/<backend>/stat, three
-- pairs alternated): 1,074, 1,649 and 1,374 µs per call with these settings,
-- 1,724, 2,064 and 1,779 without; at 100 jobs per call, no difference.
alter function jobs.fetch(text, text[], integer[], bigint[], uuid[], jsonb[], boolean)
  set plan_cache_mode = force_generic_plan;
alter function jobs.fetch(text, text[], integer[], bigint[], uuid[], jsonb[], boolean)
  set enable_seqscan = off;
alter function jobs.fair_share(text, text, integer)
  set plan_cache_mode = force_generic_plan;
alter function jobs.fair_share(text, text, integer)
  set enable_seqscan = off;

-- Down Migration
-- (Each setting by name: RESET ALL would also drop the functions' search_path.)
alter function jobs.fair_share(text, text, integer) reset enable_seqscan;
alter function jobs.fair_share(text, text, integer) reset plan_cache_mode;
alter function jobs.fetch(text, text[], integer[], bigint[], uuid[], jsonb[], boolean) reset enable_seqscan;
alter function jobs.fetch(text, text[], integer[], bigint[], uuid[], jsonb[], boolean) reset plan_cache_mode;
