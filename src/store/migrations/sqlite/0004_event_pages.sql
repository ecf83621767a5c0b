-- stategraph schema version 4 (SQLite): the event log as pages.
--
-- One row per append (a superstep's events) instead of one per event: the
-- events as one JSON array, keyed by the run and the append's seq range.
-- The store's `pages` module says why and what the reader relies on; the
-- append checks in its transaction that ranges of a run never overlap.

CREATE TABLE run_event_pages (
    run_id     TEXT    NOT NULL,
    first_seq  INTEGER NOT NULL,
    last_seq   INTEGER NOT NULL,
    -- [{seq, at, step, node?, task?, event}, ...] in seq order; `event` is
    -- the EventKind as JSON.
    events     TEXT    NOT NULL,
    PRIMARY KEY (run_id, last_seq),
    CHECK (first_seq <= last_seq)
) STRICT;

-- Existing events become one page per run.
INSERT INTO run_event_pages (run_id, first_seq, last_seq, events)
SELECT run_id, min(seq), max(seq),
       '[' || group_concat(json_object('seq', seq, 'at', at, 'step', step, 'node', node,
                                       'task', task, 'event', json(payload)), ',' ORDER BY seq) || ']'
FROM run_events
GROUP BY run_id;

DROP TABLE run_events;
