-- Up Migration
create table tax.quotes (
  id                uuid primary key,
  client_id         text not null,
  idempotency_key   text not null,
  fingerprint       text not null,
  jurisdiction      text not null,
  amount            bigint not null check (amount > 0),
  currency          char(3) not null,
  rate              numeric(9, 6) not null check (rate >= 0 and rate < 1),
  tax               bigint not null check (tax >= 0),
  total             bigint not null,
  source            text not null check (source in ('provider', 'compensation')),
  table_version     text,
  response          jsonb not null,
  created_at        timestamptz not null default now(),
  reconciled_rate   numeric(9, 6),
  reconciled_tax    bigint,
  reconciled_at     timestamptz,
  unique (client_id, idempotency_key),
  check (total = amount + tax),
  check ((source = 'compensation') = (table_version is not null))
);

-- Down Migration
drop table tax.quotes;
