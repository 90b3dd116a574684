-- Up Migration
create table fraud.screenings (
  id                uuid primary key,
  client_id         text not null,
  idempotency_key   text not null,
  fingerprint       text not null,
  card_token        text not null,
  merchant_id       text not null,
  amount            bigint not null check (amount > 0),
  currency          char(3) not null,
  ip_country        char(2),
  billing_country   char(2),
  mode              text not null check (mode in ('sync', 'async')),
  status            text not null check (status in ('queued', 'final')),
  score             integer check (score between 0 and 100),
  decision          text check (decision in ('approve', 'review', 'decline')),
  reasons           jsonb,
  response          jsonb not null,
  created_at        timestamptz not null default now(),
  scored_at         timestamptz,
  unique (client_id, idempotency_key),
  check ((status = 'final') = (score is not null and decision is not null))
);
-- Velocity and history look-ups read one card's recent screenings.
create index screenings_card_time on fraud.screenings (card_token, created_at desc);

-- Down Migration
drop table fraud.screenings;
