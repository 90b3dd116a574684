-- Up Migration
-- Each lane replica's dependency breakers with its heartbeat
-- (shared/lane-kit/replica-share.ts): 'closed' when every one is, 'open' when
-- any is open, else 'half_open' (probing); null for a lane without breakers.
-- worker-tax reads the tax lane's: while a live replica's breaker is open and
-- none is closed, the lane is probing the provider already, and the worker's
-- own probe asks these rows instead of the provider (services/tax/jobs).
alter table card_auth.lane_replicas add column breaker text check (breaker in ('closed', 'open', 'half_open'));
alter table fraud.lane_replicas add column breaker text check (breaker in ('closed', 'open', 'half_open'));
alter table tax.lane_replicas add column breaker text check (breaker in ('closed', 'open', 'half_open'));

-- Down Migration
alter table tax.lane_replicas drop column breaker;
alter table fraud.lane_replicas drop column breaker;
alter table card_auth.lane_replicas drop column breaker;
