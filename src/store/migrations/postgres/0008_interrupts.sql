-- stategraph schema version 8 (PostgreSQL): runs paused at an interrupt.
--
-- A run waiting for a person's answer (a tool approval, a client-side
-- tool's output, a question) is `interrupted`: nothing executes it and it
-- holds no lease until a resume claims it back to `running`.

ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('running', 'finished', 'failed', 'cancelled', 'interrupted'));
CREATE INDEX runs_interrupted ON runs (created_at) WHERE status = 'interrupted';
