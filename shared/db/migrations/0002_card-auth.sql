-- Up Migration
create table card_auth.card_accounts (
  token       text primary key check (token ~ '^tok_[A-Za-z0-9_]{4,60}$'),
  currency    char(3) not null check (currency ~ '^[A-Z]{3}$'),
  available   bigint not null check (available >= 0),
  held        bigint not null default 0 check (held >= 0),
  status      text not null default 'active' check (status in ('active', 'inactive')),
  created_at  timestamptz not null default now()
);

create table card_auth.authorizations (
  id               uuid primary key,
  client_id        text not null,
  idempotency_key  text not null,
  fingerprint      text not null,
  merchant_id      text not null,
  card_token       text not null,
  amount           bigint not null check (amount > 0),
  currency         char(3) not null,
  status           text not null check (status in ('approved', 'declined')),
  decline_reason   text check (decline_reason in ('insufficient_funds', 'unknown_card', 'card_inactive', 'currency_mismatch')),
  response         jsonb not null,
  created_at       timestamptz not null default now(),
  unique (client_id, idempotency_key),
  check ((status = 'declined') = (decline_reason is not null))
);

create table card_auth.holds (
  id                uuid primary key default gen_random_uuid(),
  authorization_id  uuid not null unique references card_auth.authorizations (id),
  card_token        text not null references card_auth.card_accounts (token),
  amount            bigint not null check (amount > 0),
  currency          char(3) not null,
  created_at        timestamptz not null default now()
);

-- One round trip, one transaction: the authorization row, the balance change and
-- the hold commit together or not at all. The unique (client_id, idempotency_key)
-- makes a concurrent duplicate wait for the first transaction and then see its
-- committed row, so a key can never place two holds. The balance update is a
-- single conditional UPDATE (no read-then-write race).
-- Returns the stored row; `replayed` is true when the key existed already.
create function card_auth.authorize(
  p_id uuid, p_client text, p_key text, p_fingerprint text,
  p_merchant text, p_card text, p_amount bigint, p_currency text
) returns table (id uuid, fingerprint text, response jsonb, replayed boolean)
language plpgsql as $$
declare
  v_inserted uuid;
  v_acct record;
  v_status text := 'approved';
  v_reason text;
  v_response jsonb;
begin
  insert into card_auth.authorizations as a (id, client_id, idempotency_key, fingerprint, merchant_id, card_token, amount, currency, status, decline_reason, response)
  values (p_id, p_client, p_key, p_fingerprint, p_merchant, p_card, p_amount, p_currency, 'declined', 'unknown_card', '{}'::jsonb)
  on conflict (client_id, idempotency_key) do nothing
  returning a.id into v_inserted;

  if v_inserted is null then
    return query select a.id, a.fingerprint, a.response, true
      from card_auth.authorizations a where a.client_id = p_client and a.idempotency_key = p_key;
    return;
  end if;

  update card_auth.card_accounts c
     set available = c.available - p_amount, held = c.held + p_amount
   where c.token = p_card and c.status = 'active' and c.currency = p_currency and c.available >= p_amount
  returning c.token into v_acct;

  if found then
    insert into card_auth.holds (authorization_id, card_token, amount, currency) values (p_id, p_card, p_amount, p_currency);
  else
    v_status := 'declined';
    select c.status, c.currency, c.available into v_acct from card_auth.card_accounts c where c.token = p_card;
    v_reason := case
      when not found then 'unknown_card'
      when v_acct.status <> 'active' then 'card_inactive'
      when v_acct.currency <> p_currency then 'currency_mismatch'
      else 'insufficient_funds' end;
  end if;

  select jsonb_strip_nulls(jsonb_build_object(
      'id', a.id, 'status', v_status, 'declineReason', v_reason,
      'merchantId', a.merchant_id, 'cardToken', a.card_token,
      'amount', jsonb_build_object('value', a.amount, 'currency', a.currency),
      'createdAt', to_char(a.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
    into v_response from card_auth.authorizations a where a.id = p_id;

  update card_auth.authorizations a set status = v_status, decline_reason = v_reason, response = v_response where a.id = p_id;
  return query select p_id, p_fingerprint, v_response, false;
end $$;

-- Down Migration
drop function card_auth.authorize;
drop table card_auth.holds;
drop table card_auth.authorizations;
drop table card_auth.card_accounts;
