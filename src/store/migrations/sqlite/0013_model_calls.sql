-- stategraph schema version 13 (SQLite): model calls as they were sent.
--
-- A call record lists the hashes of its content (messages after
-- templating, tool definitions, response format); each piece of content is
-- stored once in `call_parts` under its hash, so a chat's history, sent
-- again with every turn, is stored once. `last_used` is the newest record
-- that used a part: expiring content older than a retention deletes the
-- parts last used before it and marks the older records `expired`, with no
-- reference counts. Records go with their run when it is pruned.

CREATE TABLE model_calls (
    run_id      TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    expired     INTEGER NOT NULL DEFAULT 0,
    request     TEXT    NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT;

CREATE INDEX model_calls_by_time ON model_calls (created_at) WHERE expired = 0;

CREATE TABLE call_parts (
    hash        TEXT    NOT NULL PRIMARY KEY,
    body        TEXT    NOT NULL,
    last_used   INTEGER NOT NULL
) STRICT;

CREATE INDEX call_parts_by_use ON call_parts (last_used);
