-- stategraph schema version 3 (SQLite): stop requests across processes.
--
-- `POST /api/chat/{id}/stop` in a process that does not execute the run sets
-- the flag; the executing process polls its own leased runs for it.

ALTER TABLE runs ADD COLUMN stop_requested INTEGER NOT NULL DEFAULT 0;
