-- Up Migration
-- card_auth.authorize_batch: the authorizations that arrived while the lane's
-- previous commit was in flight, written by one statement in one transaction
-- (group commit, shared/db/group-commit.ts): one round trip, one WAL flush and
-- one backend wake-up per batch instead of per authorization. Each element is
-- card_auth.authorize itself, so a batch decides exactly what the same calls
-- one after the other would; synchronous_commit stays on, and the statement
-- returns only once the whole batch is durable.
-- A batch never waits for a lock: an element whose card account another
-- transaction holds comes back `busy` and the lane writes it alone on its pool,
-- where it waits as it always did, so one locked account holds up its own
-- authorization, not the batch. (The key's advisory lock is a try-lock, and its
-- unique key is guarded by it.) Elements run in card-token order. A key twice
-- in one batch: the advisory lock is the session's already, and the second
-- finds the first's row (a replay), as a retry after the commit would.
create function card_auth.authorize_batch(
  p_ids uuid[], p_clients text[], p_keys text[], p_fingerprints text[],
  p_merchants text[], p_cards text[], p_amounts bigint[], p_currencies text[]
) returns table (
  ord integer, id uuid, fingerprint text, status text, decline_reason text, merchant_id text, card_token text,
  amount bigint, currency text, created_at timestamptz, replayed boolean, in_progress boolean, busy boolean
)
language plpgsql as $$
declare
  i integer;
begin
  for i in select g from generate_subscripts(p_ids, 1) g order by p_cards[g], g loop
    perform 1 from card_auth.card_accounts c where c.token = p_cards[i] for update skip locked;
    if not found and exists (select 1 from card_auth.card_accounts c where c.token = p_cards[i]) then
      return query select i, null::uuid, null::text, null::text, null::text, null::text, null::text, null::bigint, null::text, null::timestamptz, false, false, true;
      continue;
    end if;
    return query select i, a.*, false from card_auth.authorize(p_ids[i], p_clients[i], p_keys[i], p_fingerprints[i], p_merchants[i], p_cards[i], p_amounts[i], p_currencies[i]) a;
  end loop;
end $$;

-- Down Migration
drop function card_auth.authorize_batch(uuid[], text[], text[], text[], text[], text[], bigint[], text[]);
