-- Up Migration
-- An approved authorization is its hold: the hold no longer has a row of its
-- own. The separate table cost each approval a second insert, two more index
-- entries and two foreign-key checks (each a SELECT ... FOR KEY SHARE on the
-- referenced row): a large share of card_auth.authorize's server CPU.
-- card_auth.holds stays, as a view, for whoever reads holds.
create table card_auth.holds_before_0008 as table card_auth.holds;
drop table card_auth.holds;
create view card_auth.holds as
  select a.id, a.id as authorization_id, a.card_token, a.amount, a.currency, a.created_at
    from card_auth.authorizations a
   where a.status = 'approved';
-- Holds written by the first form of authorize all belong to approved
-- authorizations (its tests checked it); the copy keeps them for an audit.
comment on table card_auth.holds_before_0008 is 'card_auth.holds as it was before migration 0008 made holds a view over approved authorizations';

create or replace function card_auth.authorize(
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
  -- One request per (client, key) at a time (see 0006): a retry that arrives
  -- while the first runs is told so at once.
  if not pg_try_advisory_xact_lock(hashtextextended(p_client || chr(31) || p_key, 727002)) then
    return query select null::uuid, null::text, null::text, null::text, null::text, null::text, null::bigint, null::text, null::timestamptz, false, true;
    return;
  end if;

  return query select a.id, a.fingerprint, a.status, a.decline_reason, a.merchant_id, a.card_token, a.amount, a.currency::text, a.created_at, true, false
    from card_auth.authorizations a where a.client_id = p_client and a.idempotency_key = p_key;
  if found then return; end if;

  -- The hold: a single conditional UPDATE of the balance (no read-then-write race),
  -- and the approved authorization below, in the same transaction.
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
  return query select p_id, p_fingerprint, v_status, v_reason, p_merchant, p_card, p_amount, p_currency, now(), false, false;
end $$;

-- Down Migration
drop view card_auth.holds;
create table card_auth.holds (
  id                uuid primary key default gen_random_uuid(),
  authorization_id  uuid not null unique references card_auth.authorizations (id),
  card_token        text not null references card_auth.card_accounts (token),
  amount            bigint not null check (amount > 0),
  currency          char(3) not null,
  created_at        timestamptz not null default now()
);
insert into card_auth.holds (authorization_id, card_token, amount, currency, created_at)
  select id, card_token, amount, currency, created_at from card_auth.authorizations where status = 'approved';
drop table card_auth.holds_before_0008;
