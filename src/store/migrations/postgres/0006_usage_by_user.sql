-- A user's token usage since a time (the daily token quota, checked before
-- a chat turn starts): an index-only scan of one short range.
CREATE INDEX runs_usage_by_user ON runs (user_id, created_at) INCLUDE (prompt_tokens, completion_tokens);
