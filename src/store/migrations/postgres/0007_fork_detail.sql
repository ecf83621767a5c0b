-- What a fork edited: its mode (after or before a node), the node(s), the
-- fields set and the chat message it is an alternative of, as the JSON of
-- the run's `parent` (a ForkOrigin). parent_run and parent_step stay the
-- columns queries use.
ALTER TABLE runs ADD COLUMN parent_fork JSONB;
