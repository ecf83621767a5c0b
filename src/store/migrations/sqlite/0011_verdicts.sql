-- stategraph schema version 11 (SQLite): a judge model's verdicts on runs.
--
-- `stategraph eval --criterion … --judge ROLE` and the studio's Eval page
-- put each criterion to a judge model; its verdict (pass, fail, error) and
-- reason are kept with the run they judge, added and never changed, and
-- deleted with the run when it is pruned. (Version 10 is another change's.)

CREATE TABLE run_verdicts (
    id          TEXT    NOT NULL PRIMARY KEY,
    run_id      TEXT    NOT NULL,
    criterion   TEXT    NOT NULL,
    verdict     TEXT    NOT NULL CHECK (verdict IN ('pass', 'fail', 'error')),
    reason      TEXT    NOT NULL,
    judge       TEXT    NOT NULL,
    model       TEXT    NOT NULL,
    answer      TEXT    NOT NULL,
    source      TEXT    NOT NULL,
    created_at  INTEGER NOT NULL
) STRICT;

CREATE INDEX run_verdicts_by_run ON run_verdicts (run_id, created_at, id);
