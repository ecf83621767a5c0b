-- stategraph schema version 9 (PostgreSQL): what a run cost.
--
-- The run's cost in billionths of a US dollar, at the prices the
-- configuration gave its models ([llm.prices.MODEL]) when the calls were
-- made; 0 for runs before this version and for models without prices. The
-- daily cost cap (`[limits] daily_cost_usd`) sums it per user and day, so the
-- usage index covers it too.

ALTER TABLE runs ADD COLUMN cost_nano_usd BIGINT NOT NULL DEFAULT 0;

DROP INDEX runs_usage_by_user;
CREATE INDEX runs_usage_by_user ON runs (user_id, created_at) INCLUDE (prompt_tokens, completion_tokens, cost_nano_usd);
