-- stategraph schema version 4 (PostgreSQL): the event log as pages.
--
-- One row per append (a superstep's events) instead of one per event: the
-- events go in as one JSON array, keyed by the run and the append's seq
-- range. The store's `pages` module says why (server CPU per chat run) and
-- what the reader relies on.
--
-- `events` is TEXT holding JSON, not `json`: nothing queries inside it
-- (cast with `events::json` to look), and validating every page on insert
-- was 5% of the server's CPU on the chat path. It is compressed with lz4
-- where the server has it (much cheaper than the default pglz, which was
-- 12%), pglz otherwise; checkpoints' patches and snapshots too.
--
-- `btree_gist` lets the exclusion constraint compare run ids with `=`;
-- it ships with PostgreSQL (contrib) and is a trusted extension, so the
-- database owner can create it.

CREATE EXTENSION IF NOT EXISTS btree_gist;

CREATE TABLE run_event_pages (
    run_id     UUID   NOT NULL,
    first_seq  BIGINT NOT NULL,
    last_seq   BIGINT NOT NULL,
    -- [{seq, at, step, node?, task?, event}, ...] in seq order; `event` is
    -- the EventKind as JSON.
    events     TEXT   NOT NULL,
    PRIMARY KEY (run_id, last_seq),
    CHECK (first_seq <= last_seq),
    -- A seq is stored once: ranges of one run never overlap.
    CONSTRAINT run_event_pages_no_overlap
        EXCLUDE USING gist (run_id WITH =, int8range(first_seq, last_seq, '[]') WITH &&)
);

DO $$
BEGIN
    ALTER TABLE run_event_pages ALTER COLUMN events SET COMPRESSION lz4;
    ALTER TABLE checkpoints ALTER COLUMN writes SET COMPRESSION lz4,
                            ALTER COLUMN snapshot SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
    NULL; -- built without lz4: the default compression stays
END $$;

-- Existing events become one page per run.
INSERT INTO run_event_pages (run_id, first_seq, last_seq, events)
SELECT run_id, min(seq), max(seq),
       json_agg(json_build_object('seq', seq, 'at', at, 'step', step, 'node', node,
                                  'task', task, 'event', payload) ORDER BY seq)::text
FROM run_events
GROUP BY run_id;

DROP TABLE run_events;
