-- A user's token usage since a time (the daily token quota, checked before
-- a chat turn starts): read from this index alone. The runs rows hold the
-- input state, whose text can span overflow pages that the token columns
-- come after; the index keeps the sum to one short range scan.
CREATE INDEX runs_usage_by_user ON runs (user_id, created_at, prompt_tokens, completion_tokens);
