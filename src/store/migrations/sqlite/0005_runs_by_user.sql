-- Runs listed per user (GET /api/runs, the studio): the filter is in the
-- query, so one user's runs never crowd another's out of a page.
CREATE INDEX runs_by_user ON runs (user_id, created_at DESC, id DESC);
