-- Runs listed by status, newest first: the upkeep's look for paused runs
-- whose wait lapsed (`status = 'interrupted'`, every recovery interval),
-- and the studio's and API's status filter.
--
-- Without it that look walked every run newest first, reading the whole
-- runs table — on an idle server that had just served a load, into each
-- SQLite reader's page cache in turn: +17 MB of resident memory a minute
-- and a half after the load, once memory stopped being handed back
-- (issue 38, `cargo bench --bench load -- afterload`).
CREATE INDEX runs_by_status ON runs (status, created_at DESC, id DESC);
