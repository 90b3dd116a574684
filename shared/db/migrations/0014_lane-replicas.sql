-- Up Migration
-- Each lane replica's heartbeat and the share of its role's CONNECTION LIMIT it
-- may hold (shared/lane-kit/replica-share.ts). A replica sizes its pool to its
-- fair share among the replicas whose heartbeat is recent, and grows only into
-- what the others' recorded shares leave free, so the role's budget follows the
-- replicas that really run, with no replica count kept in step by hand. In the
-- lane's own schema: each role reads and writes its own lane's rows only.
create table card_auth.lane_replicas (
  id uuid primary key,
  heartbeat_at timestamptz not null default now(),
  share integer not null check (share >= 0)
);
create table fraud.lane_replicas (like card_auth.lane_replicas including all);
create table tax.lane_replicas (like card_auth.lane_replicas including all);

-- Down Migration
drop table tax.lane_replicas;
drop table fraud.lane_replicas;
drop table card_auth.lane_replicas;
