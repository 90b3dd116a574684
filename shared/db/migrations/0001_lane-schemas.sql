-- Up Migration
-- One schema per lane; each lane role is granted its own schema only (roles.ts).
revoke all on schema public from public;
create schema card_auth;
create schema fraud;
create schema tax;
create schema jobs;

-- Down Migration
drop schema jobs cascade;
drop schema tax cascade;
drop schema fraud cascade;
drop schema card_auth cascade;
