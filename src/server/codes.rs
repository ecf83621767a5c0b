//! The catalog of error codes: every failure the HTTP API answers, each
//! with one status and one stable code. Handlers name a [`Code`]; the
//! status comes from here, so one failure cannot be a 400 on one path and
//! a 409 on another. docs/server.md lists the catalog (a test checks it
//! does, entry by entry).
//!
//! Two kinds of response keep a status of their own: rejections by the
//! HTTP framework (a body it cannot read, a request line hyper cannot
//! parse) keep the framework's status under the code for it
//! ([`Code::for_status`]); and the LangGraph API words its errors
//! `{"detail": …}` with the same codes beside.

use axum::http::StatusCode;

macro_rules! catalog {
    ($( $(#[doc = $doc:literal])+ $name:ident = ($status:literal, $code:literal), )+) => {
        /// A failure the API answers: its stable code and its status.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Code {
            $( $(#[doc = $doc])+ $name, )+
        }

        impl Code {
            /// Every code, in catalog order.
            pub const ALL: &'static [Code] = &[$(Code::$name),+];

            /// The stable spelling clients match on.
            pub fn as_str(self) -> &'static str {
                match self { $(Code::$name => $code,)+ }
            }

            /// The HTTP status this failure is answered with.
            pub fn status(self) -> StatusCode {
                let status: u16 = match self { $(Code::$name => $status,)+ };
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }

            /// What the failure means (the catalog's doc line).
            pub fn meaning(self) -> &'static str {
                match self { $(Code::$name => concat!($($doc),+).trim_ascii(),)+ }
            }
        }
    };
}

catalog! {
    // 400: the request is wrong, and saying so tells the client what to fix.
    /// A body, query or path that cannot be read.
    InvalidRequest = (400, "invalid_request"),
    /// The chat body is not valid JSON.
    InvalidJson = (400, "invalid_json"),
    /// The chat body is not UTF-8.
    InvalidUtf8 = (400, "invalid_utf8"),
    /// A chat or message id that is empty, too long or not visible text.
    InvalidId = (400, "invalid_id"),
    /// A message role other than user, assistant or system.
    InvalidRole = (400, "invalid_role"),
    /// A message part that is not one of the AI SDK's part types.
    InvalidPart = (400, "invalid_part"),
    /// A chat request with no messages.
    EmptyMessages = (400, "empty_messages"),
    /// A user or system message without parts.
    EmptyParts = (400, "empty_parts"),
    /// A chat request with no user message.
    NoUserMessage = (400, "no_user_message"),
    /// A `trigger` other than submit-message or regenerate-message.
    UnknownTrigger = (400, "unknown_trigger"),
    /// A body that does not have the endpoint's shape.
    InvalidBody = (400, "invalid_body"),
    /// A run id that is not a UUID (where one is required in the path).
    InvalidRunId = (400, "invalid_run_id"),
    /// A `cursor` this server did not give.
    InvalidCursor = (400, "invalid_cursor"),
    /// A step the run does not have.
    InvalidStep = (400, "invalid_step"),
    /// A `limit` out of range.
    InvalidLimit = (400, "invalid_limit"),
    /// A test case name that cannot be a file name.
    InvalidName = (400, "invalid_name"),
    /// A `Last-Event-ID` the stream never sent.
    InvalidLastEventId = (400, "invalid_last_event_id"),
    /// A NUL (U+0000) in the path, query or body.
    InvalidCharacter = (400, "invalid_character"),
    /// A body whose framing (`Content-Length`, chunks) is broken.
    MalformedBody = (400, "malformed_body"),
    /// A request line or header hyper cannot parse (its status is hyper's).
    MalformedRequest = (400, "malformed_request"),
    /// The input a request gives is not a valid state of the graph.
    InvalidInput = (400, "invalid_input"),
    /// Evaluation criteria that are empty, too long or too many.
    InvalidCriteria = (400, "invalid_criteria"),
    /// A judge whose model cannot judge (the offline one, or none).
    JudgeUnavailable = (400, "judge_unavailable"),
    /// A regenerate names a message the chat does not have.
    UnknownMessage = (400, "unknown_message"),
    /// A graph that is not served here (named by the request, or the graph
    /// a stored run ran, no longer served).
    UnknownGraph = (400, "unknown_graph"),
    /// An answer to an interrupt the run does not wait at.
    UnknownInterrupt = (400, "unknown_interrupt"),
    /// A resume that leaves an interrupt unanswered.
    UnansweredInterrupt = (400, "unanswered_interrupt"),
    /// A model call index the run does not have.
    BadCallIndex = (400, "bad_call_index"),
    /// `breakpoints` not of the shape `{before: [node…], after: [node…]}`.
    InvalidBreakpoints = (400, "invalid_breakpoints"),
    /// A node the graph does not have.
    UnknownNode = (400, "unknown_node"),
    /// No checkpoint at the step asked for.
    NoCheckpoint = (400, "no_checkpoint"),
    /// A fork or edit that needs a step.
    StepRequired = (400, "step_required"),
    /// A node that did not run at the step asked for.
    NodeNotRun = (400, "node_not_run"),
    /// A node that ran more than once at the step asked for.
    AmbiguousNode = (400, "ambiguous_node"),
    /// A node that ran at several steps (name the step).
    AmbiguousStep = (400, "ambiguous_step"),
    /// A fork or edit that needs a node.
    NodeRequired = (400, "node_required"),
    /// A field the graph's state does not have.
    UnknownField = (400, "unknown_field"),
    /// A value that does not fit its field.
    InvalidValue = (400, "invalid_value"),
    /// An edit after which no edge leaves the node.
    NoRoute = (400, "no_route"),
    /// An edit after which routing fails.
    RouteFailed = (400, "route_failed"),
    /// A recording that cannot be forked (its state no longer fits).
    InvalidFork = (400, "invalid_fork"),
    // 401, 404, 405
    /// No or a wrong API key.
    Unauthorized = (401, "unauthorized"),
    /// No such route, chat, run, graph page or thread (another user's looks
    /// the same).
    NotFound = (404, "not_found"),
    /// No model call at that index.
    NoCall = (404, "no_call"),
    /// The route exists with other methods.
    MethodNotAllowed = (405, "method_not_allowed"),
    // 409: the request is fine, the resource's state refuses it now.
    /// A run of the chat (thread) is in flight.
    RunInProgress = (409, "run_in_progress"),
    /// The chat has no run to stop.
    NoActiveRun = (409, "no_active_run"),
    /// The run does not wait for an answer (any more).
    NotInterrupted = (409, "not_interrupted"),
    /// The run is paused, but not at a breakpoint.
    NotAtBreakpoint = (409, "not_at_breakpoint"),
    /// The run is still running.
    Running = (409, "running"),
    /// The run is not running (nothing to cancel).
    NotRunning = (409, "not_running"),
    /// The run's recording cannot be executed again.
    NotReexecutable = (409, "not_reexecutable"),
    /// The run's stream is not kept.
    NotStreamed = (409, "not_streamed"),
    /// `attach` on a run that answered no chat message.
    NotAttachable = (409, "not_attachable"),
    /// A thread with that id exists already.
    ThreadExists = (409, "thread_exists"),
    // 410, 413, 414, 415, 422, 431
    /// The interrupt's wait lapsed.
    InterruptExpired = (410, "interrupt_expired"),
    /// A body over `body_limit`.
    PayloadTooLarge = (413, "payload_too_large"),
    /// A request URI too long for hyper.
    UriTooLong = (414, "uri_too_long"),
    /// A chat body not declared `application/json`.
    UnsupportedMediaType = (415, "unsupported_media_type"),
    /// An answer of the wrong shape or type for its interrupt.
    InvalidAnswer = (422, "invalid_answer"),
    /// A LangGraph API body or parameter that does not validate.
    ValidationError = (422, "validation_error"),
    /// A LangGraph API feature this server does not have.
    NotSupported = (422, "not_supported"),
    /// A request head over `max_header_bytes` or with over 100 fields.
    HeadersTooLarge = (431, "headers_too_large"),
    // 429: come back later (`retry-after` says when).
    /// The server is at `max_concurrent_runs`.
    TooManyRuns = (429, "too_many_runs"),
    /// The user's request rate is over its limit.
    RateLimited = (429, "rate_limited"),
    /// The user's daily token quota is spent.
    TokenQuotaExceeded = (429, "token_quota_exceeded"),
    /// The user's daily cost limit is spent.
    CostLimit = (429, "cost_limit"),
    /// A 429 from the framework.
    TooManyRequests = (429, "too_many_requests"),
    // 5xx: the server's side.
    /// An internal failure (logged with the reference the message gives).
    Internal = (500, "internal"),
    /// A dependency (the store) is down; retry.
    Unavailable = (503, "unavailable"),
    /// The server is shutting down.
    ShuttingDown = (503, "shutting_down"),
    /// The request took longer than `request_timeout`.
    Timeout = (504, "timeout"),
}

impl Code {
    /// The code a spelling names, for the codes lower layers give their
    /// errors (`EditError::code`, `BreakpointError::code`): `None` for a
    /// spelling the catalog lacks (a test keeps there being none).
    pub fn named(code: &str) -> Option<Code> {
        Code::ALL.iter().copied().find(|c| c.as_str() == code)
    }

    /// The code of a status the framework produced without one.
    pub fn for_status(status: StatusCode) -> Code {
        match status.as_u16() {
            401 => Code::Unauthorized,
            404 => Code::NotFound,
            405 => Code::MethodNotAllowed,
            408 | 504 => Code::Timeout,
            413 => Code::PayloadTooLarge,
            414 => Code::UriTooLong,
            415 => Code::UnsupportedMediaType,
            429 => Code::TooManyRequests,
            431 => Code::HeadersTooLarge,
            503 => Code::Unavailable,
            500..=599 => Code::Internal,
            _ => Code::InvalidRequest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_snake_case_and_documented() {
        let mut seen = std::collections::HashSet::new();
        let doc = include_str!("../../docs/server.md");
        for c in Code::ALL {
            let s = c.as_str();
            assert!(seen.insert(s), "`{s}` is in the catalog twice");
            assert!(
                s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{s}"
            );
            assert!(!c.meaning().is_empty(), "{s} has no meaning");
            let row = format!("| `{s}` | {} |", c.status().as_u16());
            assert!(doc.contains(&row), "docs/server.md lacks the row `{row}`");
        }
    }

    /// The codes lower layers give their errors are all in the catalog: a
    /// new one added there without an entry here would be answered as
    /// `invalid_request`.
    #[test]
    fn lower_layer_codes_are_in_the_catalog() {
        let sources = [
            include_str!("../replay/fork.rs"),
            include_str!("../runs/fork.rs"),
            include_str!("../runs/breaks.rs"),
        ];
        let mut n = 0;
        for src in sources {
            let body = src.split("fn code(&self)").nth(1).expect("a code() fn");
            let body = &body[..body.find("\n    }\n").expect("its end")];
            for code in body.split('"').skip(1).step_by(2) {
                assert!(
                    Code::named(code).is_some(),
                    "`{code}` is not in the catalog"
                );
                n += 1;
            }
        }
        assert!(n >= 15, "found only {n} codes");
    }

    #[test]
    fn a_status_without_a_code_gets_the_catalogs() {
        assert_eq!(Code::for_status(StatusCode::NOT_FOUND), Code::NotFound);
        assert_eq!(
            Code::for_status(StatusCode::BAD_REQUEST),
            Code::InvalidRequest
        );
        assert_eq!(Code::named("unknown_graph"), Some(Code::UnknownGraph));
        assert_eq!(Code::UnknownGraph.status(), StatusCode::BAD_REQUEST);
        assert_eq!(Code::named("no_such_code"), None);
    }
}
