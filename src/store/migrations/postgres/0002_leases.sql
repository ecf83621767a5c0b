-- stategraph schema version 2 (PostgreSQL): indexes for leases and pruning.
--
-- `renew_leases` runs every few seconds on every instance and looks up the
-- running runs one owner holds; `prune` looks for chats idle since a time.
-- (`claim_orphans` uses `runs_by_lease` from version 1.)

CREATE INDEX runs_by_lease_owner ON runs (lease_owner) WHERE status = 'running';
CREATE INDEX chats_by_updated ON chats (updated_at);
