-- stategraph schema version 14 (SQLite): the recent event log.
--
-- Pages of streamed tokens of a running run, in append order: no key but
-- the rowid, so inserts of many runs share the right edge of one B-tree
-- and a commit writes a few pages however many runs stream (an insert into
-- `run_event_pages` dirties its run's own index leaf). Rows are folded into
-- one `run_event_pages` page per run when its step ends; the `sqlite::recent`
-- module says how they are found and why reads stay exact.

CREATE TABLE run_event_recent (
    run_id     TEXT    NOT NULL,
    first_seq  INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    -- As `run_event_pages.events`.
    events     TEXT    NOT NULL,
    CHECK (first_seq <= last_seq)
) STRICT;
