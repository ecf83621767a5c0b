-- stategraph schema version 8 (SQLite): runs paused at an interrupt.
--
-- A run waiting for a person's answer (a tool approval, a client-side
-- tool's output, a question) is `interrupted`: nothing executes it and it
-- holds no lease until a resume claims it back to `running`.
--
-- SQLite cannot alter a CHECK constraint, so the table is rebuilt (no other
-- table references it) and its indexes are created again.

CREATE TABLE runs_v8 (
    id                TEXT    NOT NULL PRIMARY KEY,
    chat_id           TEXT,
    user_id           TEXT    NOT NULL,
    graph             TEXT    NOT NULL,
    graph_version     TEXT    NOT NULL,
    status            TEXT    NOT NULL CHECK (status IN ('running', 'finished', 'failed', 'cancelled', 'interrupted')),
    input             TEXT    NOT NULL,
    created_at        INTEGER NOT NULL,
    finished_at       INTEGER,
    error             TEXT,
    prompt_tokens     INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    parent_run        TEXT,
    parent_step       INTEGER,
    request_id        TEXT,
    message_id        TEXT,
    last_seq          INTEGER NOT NULL DEFAULT 0,
    last_step         INTEGER NOT NULL DEFAULT 0,
    lease_owner       TEXT,
    lease_until       INTEGER,
    stop_requested    INTEGER NOT NULL DEFAULT 0,
    parent_fork       TEXT
) STRICT;

INSERT INTO runs_v8 (id, chat_id, user_id, graph, graph_version, status, input, created_at,
                     finished_at, error, prompt_tokens, completion_tokens, parent_run, parent_step,
                     request_id, message_id, last_seq, last_step, lease_owner, lease_until,
                     stop_requested, parent_fork)
SELECT id, chat_id, user_id, graph, graph_version, status, input, created_at,
       finished_at, error, prompt_tokens, completion_tokens, parent_run, parent_step,
       request_id, message_id, last_seq, last_step, lease_owner, lease_until,
       stop_requested, parent_fork
FROM runs;

DROP TABLE runs;
ALTER TABLE runs_v8 RENAME TO runs;

CREATE INDEX runs_by_created ON runs (created_at DESC, id DESC);
CREATE INDEX runs_by_chat ON runs (chat_id, created_at DESC, id DESC) WHERE chat_id IS NOT NULL;
CREATE INDEX runs_by_lease ON runs (lease_until) WHERE status = 'running';
CREATE INDEX runs_by_lease_owner ON runs (lease_owner) WHERE status = 'running';
CREATE INDEX runs_by_user ON runs (user_id, created_at DESC, id DESC);
CREATE INDEX runs_usage_by_user ON runs (user_id, created_at, prompt_tokens, completion_tokens);
CREATE INDEX runs_interrupted ON runs (created_at) WHERE status = 'interrupted';
