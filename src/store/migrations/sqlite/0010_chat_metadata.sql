-- stategraph schema version 10 (SQLite): a chat's metadata.
--
-- A JSON object a client attaches to a chat: the LangGraph Agent Server
-- API's thread metadata (`POST /threads`, `PATCH /threads/{id}`, searched
-- by `POST /threads/search`). `tags` holds a list of tags when a client
-- tags a chat. '{}' for chats made before this version and for chats
-- nobody tagged.

ALTER TABLE chats ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';
