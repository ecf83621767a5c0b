-- stategraph schema version 1 (SQLite).
--
-- Times are microseconds since the Unix epoch. JSON columns hold the text
-- serde wrote, verbatim (patches are ordered maps). Run ids are UUIDs in
-- their hyphenated text form, so the file stays readable with `sqlite3`.
-- No foreign keys between these tables: events may be written before their
-- run row, and runs and events outlive their chat; `delete_chat` removes a
-- chat's messages explicitly in the same transaction.

CREATE TABLE chats (
    id          TEXT    NOT NULL PRIMARY KEY,
    user_id     TEXT    NOT NULL,
    title       TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    active_run  TEXT
) STRICT;

CREATE INDEX chats_by_user ON chats (user_id, updated_at DESC, id DESC);

CREATE TABLE messages (
    chat_id     TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    role        TEXT    NOT NULL,
    parts       TEXT    NOT NULL,
    metadata    TEXT    NOT NULL,
    position    INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (chat_id, id)
) STRICT;

CREATE INDEX messages_by_position ON messages (chat_id, position);

CREATE TABLE runs (
    id                TEXT    NOT NULL PRIMARY KEY,
    chat_id           TEXT,
    user_id           TEXT    NOT NULL,
    graph             TEXT    NOT NULL,
    graph_version     TEXT    NOT NULL,
    status            TEXT    NOT NULL CHECK (status IN ('running', 'finished', 'failed', 'cancelled')),
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
    -- Crash recovery: which instance drives the run, and until when.
    lease_owner       TEXT,
    lease_until       INTEGER
) STRICT;

CREATE INDEX runs_by_created ON runs (created_at DESC, id DESC);
CREATE INDEX runs_by_chat ON runs (chat_id, created_at DESC, id DESC) WHERE chat_id IS NOT NULL;
CREATE INDEX runs_by_lease ON runs (lease_until) WHERE status = 'running';

CREATE TABLE run_events (
    run_id   TEXT    NOT NULL,
    seq      INTEGER NOT NULL,
    at       INTEGER NOT NULL,
    step     INTEGER NOT NULL,
    node     TEXT,
    task     INTEGER NOT NULL,
    -- The event's `type` tag, for filtering without parsing the payload.
    kind     TEXT    NOT NULL,
    -- The EventKind as JSON (the envelope fields are the columns above).
    payload  TEXT    NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT;

CREATE TABLE checkpoints (
    run_id    TEXT    NOT NULL,
    step      INTEGER NOT NULL,
    writes    TEXT    NOT NULL,
    next      TEXT    NOT NULL,
    joins     TEXT    NOT NULL,
    snapshot  TEXT,
    PRIMARY KEY (run_id, step)
) STRICT;
