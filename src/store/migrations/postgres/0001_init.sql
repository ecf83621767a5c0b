-- stategraph schema version 1 (PostgreSQL).
--
-- Times are microseconds since the Unix epoch (BIGINT). JSON columns are
-- `json`, not `jsonb`: the text serde wrote is kept verbatim, which keeps
-- the key order of patches (ordered maps), accepts every string serde can
-- write, and costs only a validation on insert. Nothing queries inside
-- them; an expression index can be added by a later migration if needed.
-- No foreign keys between these tables: events may be written before their
-- run row, and runs and events outlive their chat; `delete_chat` removes a
-- chat's messages explicitly in the same statement.

CREATE TABLE chats (
    id          TEXT   NOT NULL PRIMARY KEY,
    user_id     TEXT   NOT NULL,
    title       TEXT   NOT NULL,
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    active_run  UUID
);

CREATE INDEX chats_by_user ON chats (user_id, updated_at DESC, id DESC);

CREATE TABLE messages (
    chat_id     TEXT    NOT NULL,
    id          TEXT    NOT NULL,
    role        TEXT    NOT NULL,
    parts       JSON    NOT NULL,
    metadata    JSON    NOT NULL,
    position    BIGINT  NOT NULL,
    created_at  BIGINT  NOT NULL,
    PRIMARY KEY (chat_id, id)
);

CREATE INDEX messages_by_position ON messages (chat_id, position);

CREATE TABLE runs (
    id                UUID    NOT NULL PRIMARY KEY,
    chat_id           TEXT,
    user_id           TEXT    NOT NULL,
    graph             TEXT    NOT NULL,
    graph_version     TEXT    NOT NULL,
    status            TEXT    NOT NULL CHECK (status IN ('running', 'finished', 'failed', 'cancelled')),
    input             JSON    NOT NULL,
    created_at        BIGINT  NOT NULL,
    finished_at       BIGINT,
    error             JSON,
    prompt_tokens     BIGINT  NOT NULL DEFAULT 0,
    completion_tokens BIGINT  NOT NULL DEFAULT 0,
    parent_run        UUID,
    parent_step       INTEGER,
    request_id        TEXT,
    message_id        TEXT,
    last_seq          BIGINT  NOT NULL DEFAULT 0,
    last_step         INTEGER NOT NULL DEFAULT 0,
    -- Crash recovery: which instance drives the run, and until when.
    lease_owner       TEXT,
    lease_until       BIGINT
);

CREATE INDEX runs_by_created ON runs (created_at DESC, id DESC);
CREATE INDEX runs_by_chat ON runs (chat_id, created_at DESC, id DESC) WHERE chat_id IS NOT NULL;
CREATE INDEX runs_by_lease ON runs (lease_until) WHERE status = 'running';

CREATE TABLE run_events (
    run_id   UUID    NOT NULL,
    seq      BIGINT  NOT NULL,
    at       BIGINT  NOT NULL,
    step     INTEGER NOT NULL,
    task     INTEGER NOT NULL,
    node     TEXT,
    -- The event's `type` tag, for filtering without parsing the payload.
    kind     TEXT    NOT NULL,
    -- The EventKind as JSON (the envelope fields are the columns above).
    payload  JSON    NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE checkpoints (
    run_id    UUID    NOT NULL,
    step      INTEGER NOT NULL,
    writes    JSON    NOT NULL,
    next      JSON    NOT NULL,
    joins     JSON    NOT NULL,
    snapshot  JSON,
    PRIMARY KEY (run_id, step)
);
