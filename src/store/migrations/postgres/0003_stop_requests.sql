-- stategraph schema version 3 (PostgreSQL): stop requests across instances.
--
-- `POST /api/chat/{id}/stop` on an instance that does not execute the run
-- sets the flag; the executing instance polls its own leased runs for it
-- (`runs_by_lease_owner` from version 2 serves that query).

ALTER TABLE runs ADD COLUMN stop_requested boolean NOT NULL DEFAULT false;
