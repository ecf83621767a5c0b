//! Store wrappers for tests: [`delegate_store!`] implements every store
//! trait but [`EventLog`](stategraph::internals::store::EventLog) by passing each call
//! to an inner store, so a wrapper writes only the event-log calls it
//! changes (a fault, a delay).

/// Implements `ChatStore`, `RunStore`, `Leases`, `Maintenance`, `Verdicts`, `Calls`
/// and `Store` for `$ty` by calling `self.$inner` (an `Arc<dyn Store>`).
macro_rules! delegate_store {
    ($ty:ty, $inner:ident) => {
        const _: () = {
            use ::futures::future::BoxFuture;
            use ::stategraph::internals::events::{ErrorInfo, RunStatus, Usage};
            use ::stategraph::internals::store::{
                Appended, ChatRecord, ChatStore, Lease, Leases, Maintenance, MessageRecord,
                PruneReport, RunQuery, RunRecord, RunStore, Store, StoreResult, TurnEnd,
                TurnOutcome, TurnStart, VerdictRecord, Verdicts,
            };
            use ::stategraph::internals::store::{
                CallPart, CallRecord, CallStorage, Calls, ExpiredCalls,
            };
            use ::tokio::sync::broadcast;
            use ::uuid::Uuid;

            impl ChatStore for $ty {
                fn begin_turn(&self, turn: TurnStart) -> BoxFuture<'_, StoreResult<TurnOutcome>> {
                    self.$inner.begin_turn(turn)
                }
                fn release_chat(&self, chat_id: &str, run: Uuid) -> BoxFuture<'_, StoreResult<()>> {
                    self.$inner.release_chat(chat_id, run)
                }
                fn ensure_chat(&self, chat: ChatRecord) -> BoxFuture<'_, StoreResult<ChatRecord>> {
                    self.$inner.ensure_chat(chat)
                }
                fn get_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<Option<ChatRecord>>> {
                    self.$inner.get_chat(id)
                }
                fn list_chats(
                    &self,
                    user_id: &str,
                    limit: usize,
                ) -> BoxFuture<'_, StoreResult<Vec<ChatRecord>>> {
                    self.$inner.list_chats(user_id, limit)
                }
                fn delete_chat(&self, id: &str) -> BoxFuture<'_, StoreResult<bool>> {
                    self.$inner.delete_chat(id)
                }
                fn set_active_run(
                    &self,
                    chat_id: &str,
                    run: Option<Uuid>,
                ) -> BoxFuture<'_, StoreResult<()>> {
                    self.$inner.set_active_run(chat_id, run)
                }
                fn replace_messages_from(
                    &self,
                    chat_id: &str,
                    position: i64,
                    messages: Vec<MessageRecord>,
                ) -> BoxFuture<'_, StoreResult<()>> {
                    self.$inner
                        .replace_messages_from(chat_id, position, messages)
                }
                fn upsert_message(&self, message: MessageRecord) -> BoxFuture<'_, StoreResult<()>> {
                    self.$inner.upsert_message(message)
                }
                fn messages(
                    &self,
                    chat_id: &str,
                ) -> BoxFuture<'_, StoreResult<Vec<MessageRecord>>> {
                    self.$inner.messages(chat_id)
                }
                fn end_turn(&self, end: TurnEnd) -> BoxFuture<'_, StoreResult<()>> {
                    self.$inner.end_turn(end)
                }
            }

            impl RunStore for $ty {
                fn create_run(&self, run: RunRecord) -> BoxFuture<'_, StoreResult<()>> {
                    self.$inner.create_run(run)
                }
                fn get_run(&self, id: Uuid) -> BoxFuture<'_, StoreResult<Option<RunRecord>>> {
                    self.$inner.get_run(id)
                }
                fn list_runs(
                    &self,
                    query: &RunQuery,
                ) -> BoxFuture<'_, StoreResult<Vec<RunRecord>>> {
                    self.$inner.list_runs(query)
                }
                fn finish_run(
                    &self,
                    id: Uuid,
                    status: RunStatus,
                    error: Option<ErrorInfo>,
                    usage: Usage,
                ) -> BoxFuture<'_, StoreResult<()>> {
                    self.$inner.finish_run(id, status, error, usage)
                }
                fn usage_since(&self, user: &str, since: u64) -> BoxFuture<'_, StoreResult<Usage>> {
                    self.$inner.usage_since(user, since)
                }
            }

            impl Leases for $ty {
                fn create_leased_run(
                    &self,
                    run: RunRecord,
                    owner: &str,
                    until: u64,
                ) -> BoxFuture<'_, StoreResult<()>> {
                    self.$inner.create_leased_run(run, owner, until)
                }
                fn acquire_lease(
                    &self,
                    run: Uuid,
                    owner: &str,
                    now: u64,
                    until: u64,
                ) -> BoxFuture<'_, StoreResult<bool>> {
                    self.$inner.acquire_lease(run, owner, now, until)
                }
                fn renew_leases(
                    &self,
                    owner: &str,
                    until: u64,
                ) -> BoxFuture<'_, StoreResult<Vec<Uuid>>> {
                    self.$inner.renew_leases(owner, until)
                }
                fn claim_orphans(
                    &self,
                    owner: &str,
                    now: u64,
                    until: u64,
                    limit: usize,
                ) -> BoxFuture<'_, StoreResult<Vec<RunRecord>>> {
                    self.$inner.claim_orphans(owner, now, until, limit)
                }
                fn release_lease(&self, run: Uuid, owner: &str) -> BoxFuture<'_, StoreResult<()>> {
                    self.$inner.release_lease(run, owner)
                }
                fn lease(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Option<Lease>>> {
                    self.$inner.lease(run)
                }
                fn request_stop(&self, run: Uuid) -> BoxFuture<'_, StoreResult<bool>> {
                    self.$inner.request_stop(run)
                }
                fn stop_requests(&self, owner: &str) -> BoxFuture<'_, StoreResult<Vec<Uuid>>> {
                    self.$inner.stop_requests(owner)
                }
                fn claim_interrupted(
                    &self,
                    run: Uuid,
                    owner: &str,
                    until: u64,
                ) -> BoxFuture<'_, StoreResult<bool>> {
                    self.$inner.claim_interrupted(run, owner, until)
                }
            }

            impl Maintenance for $ty {
                fn prune(
                    &self,
                    before: u64,
                    chats: bool,
                ) -> BoxFuture<'_, StoreResult<PruneReport>> {
                    self.$inner.prune(before, chats)
                }
                fn subscribe(&self) -> broadcast::Receiver<Appended> {
                    self.$inner.subscribe()
                }
                fn release_memory(&self) -> BoxFuture<'_, ()> {
                    self.$inner.release_memory()
                }
            }

            impl Verdicts for $ty {
                fn add_verdicts(
                    &self,
                    verdicts: Vec<VerdictRecord>,
                ) -> BoxFuture<'_, StoreResult<()>> {
                    self.$inner.add_verdicts(verdicts)
                }
                fn verdicts(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Vec<VerdictRecord>>> {
                    self.$inner.verdicts(run)
                }
            }

            impl Calls for $ty {
                fn add_call(
                    &self,
                    call: CallRecord,
                    parts: Vec<CallPart>,
                ) -> BoxFuture<'_, StoreResult<()>> {
                    self.$inner.add_call(call, parts)
                }
                fn calls(&self, run: Uuid) -> BoxFuture<'_, StoreResult<Vec<CallRecord>>> {
                    self.$inner.calls(run)
                }
                fn call_parts(
                    &self,
                    hashes: Vec<String>,
                ) -> BoxFuture<'_, StoreResult<Vec<CallPart>>> {
                    self.$inner.call_parts(hashes)
                }
                fn expire_calls(&self, before: u64) -> BoxFuture<'_, StoreResult<ExpiredCalls>> {
                    self.$inner.expire_calls(before)
                }
                fn call_storage(&self) -> BoxFuture<'_, StoreResult<CallStorage>> {
                    self.$inner.call_storage()
                }
            }

            impl Store for $ty {
                fn backend(&self) -> &'static str {
                    self.$inner.backend()
                }
                fn ping(&self) -> BoxFuture<'_, StoreResult<()>> {
                    self.$inner.ping()
                }
            }
        };
    };
}

pub(crate) use delegate_store;
