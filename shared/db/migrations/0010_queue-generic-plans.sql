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
-- on a small table); jobs.workers, with no index to use, is still scanned.
-- Planning once pays off for small batches, where planning is a large part of
-- a call; at large batches it makes no difference.
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
