-- Up Migration
-- card_auth.authorize, second form. Each authorization is written once: the
-- first form inserted a placeholder row, changed the balance, then read the row
-- back to build its response in jsonb and updated the row with it (two writes
-- and a read of the same row per authorization). The answer is now made by the
-- lane from the row's columns, so the row carries no copy of it.
-- One request per (client, key) at a time: a retry that arrives while the first
-- is still running is told so at once (ERR_IDEMPOTENCY_IN_PROGRESS) instead of
-- waiting on the first's locks with a permit and a connection of its own.
alter table card_auth.authorizations drop column response;
drop function card_auth.authorize(uuid, text, text, text, text, text, bigint, text);

create function card_auth.authorize(
  p_id uuid, p_client text, p_key text, p_fingerprint text,
  p_merchant text, p_card text, p_amount bigint, p_currency text
) returns table (
  id uuid, fingerprint text, status text, decline_reason text, merchant_id text, card_token text,
  amount bigint, currency text, created_at timestamptz, replayed boolean, in_progress boolean
)
language plpgsql as $$
declare
  v_status text := 'approved';
  v_reason text;
  v_acct record;
begin
  -- Held to the end of the transaction. 64-bit hash of the key: a collision
  -- between two keys makes one of them retry (409), never share an answer (the
  -- unique (client_id, idempotency_key) stays the guarantee).
  if not pg_try_advisory_xact_lock(hashtextextended(p_client || chr(31) || p_key, 727002)) then
    return query select null::uuid, null::text, null::text, null::text, null::text, null::text, null::bigint, null::text, null::timestamptz, false, true;
    return;
  end if;

  -- The key's lock is ours, so a first attempt that committed before is visible here.
  return query select a.id, a.fingerprint, a.status, a.decline_reason, a.merchant_id, a.card_token, a.amount, a.currency::text, a.created_at, true, false
    from card_auth.authorizations a where a.client_id = p_client and a.idempotency_key = p_key;
  if found then return; end if;

  -- A single conditional UPDATE places the hold on the balance (no read-then-write race).
  update card_auth.card_accounts c
     set available = c.available - p_amount, held = c.held + p_amount
   where c.token = p_card and c.status = 'active' and c.currency = p_currency and c.available >= p_amount;
  if not found then
    v_status := 'declined';
    select c.status, c.currency into v_acct from card_auth.card_accounts c where c.token = p_card;
    v_reason := case
      when not found then 'unknown_card'
      when v_acct.status <> 'active' then 'card_inactive'
      when v_acct.currency <> p_currency then 'currency_mismatch'
      else 'insufficient_funds' end;
  end if;

  insert into card_auth.authorizations (id, client_id, idempotency_key, fingerprint, merchant_id, card_token, amount, currency, status, decline_reason)
  values (p_id, p_client, p_key, p_fingerprint, p_merchant, p_card, p_amount, p_currency, v_status, v_reason);
  if v_status = 'approved' then
    insert into card_auth.holds (authorization_id, card_token, amount, currency) values (p_id, p_card, p_amount, p_currency);
  end if;
  return query select p_id, p_fingerprint, v_status, v_reason, p_merchant, p_card, p_amount, p_currency, now(), false, false;
end $$;

-- Down Migration
drop function card_auth.authorize(uuid, text, text, text, text, text, bigint, text);
alter table card_auth.authorizations add column response jsonb;
