//! Test-file types: what a case declares, with the place each part was
//! written, so a failure and a diagnostic can both point at it.
//!
//! `parse` reads a file into these; nothing here knows a graph
//! (`check` compares them with one).

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use crate::graph::loc::{Loc, Sp};
use crate::llm::reply::Reply;

/// One test file.
#[derive(Debug)]
pub struct TestFile {
    /// The path as found.
    pub path: PathBuf,
    /// The path for messages.
    pub display: Arc<str>,
    /// The default graph of its cases.
    pub graph: Option<Sp<String>>,
    /// The cases, in file order.
    pub cases: Vec<Case>,
}

/// One case: a graph, one or more turns, and the tools that really run.
#[derive(Debug)]
pub struct Case {
    /// Its name (unique within the file).
    pub name: Sp<String>,
    /// The graph it runs.
    pub graph: Sp<String>,
    /// Tools that really run (no stub); nothing else reaches the network.
    pub real_tools: Vec<Sp<String>>,
    /// The turns, in order: the state carries from one to the next as a
    /// chat's does.
    pub turns: Vec<TurnSpec>,
    /// Where the case starts.
    pub loc: Loc,
}

/// One turn of a case.
#[derive(Debug)]
pub struct TurnSpec {
    /// How it starts: new input, or an answer to the previous turn's pause.
    pub start: Start,
    /// Scripted model replies by node id (`*`: any node), consumed per call.
    pub(crate) models: Vec<(Sp<String>, Vec<Sp<Reply>>)>,
    /// Tool stubs (the case's own come after the turn's).
    pub tools: Vec<Stub>,
    /// What must hold after it.
    pub expect: Expect,
    /// Where the turn is written.
    pub loc: Loc,
}

/// How a turn starts.
#[derive(Debug)]
pub enum Start {
    /// New input, as a chat request gives it.
    Input(InputSpec),
    /// Answers to the interrupts the previous turn paused at.
    Resume(Sp<ResumeSpec>),
}

/// `input:`.
#[derive(Debug, Default)]
pub struct InputSpec {
    /// The user's message (appended to the conversation so far).
    pub message: Option<Sp<String>>,
    /// The whole conversation (`{role, content}` items), replacing it.
    pub messages: Option<Sp<Vec<Value>>>,
    /// State fields set outright.
    pub state: Vec<(Sp<String>, Sp<Value>)>,
    /// Where it is written.
    pub loc: Loc,
}

/// `resume:`.
#[derive(Debug)]
pub enum ResumeSpec {
    /// `value:` answers the one interrupt the run waits at.
    Value(Value),
    /// `answers:` by interrupt id.
    Answers(Vec<(String, Value)>),
}

/// A stubbed tool result.
#[derive(Clone, Debug)]
pub struct Stub {
    /// The tool (`http` for an `http` node's request).
    pub name: Sp<String>,
    /// Arguments the call must contain (partial match); any when absent.
    pub args: Option<Sp<Value>>,
    /// The tool's argument schema, for a tool no registry provides (an MCP
    /// server's): arguments are checked against it and `fill_args` sees
    /// which ones the tool takes. Default: any object.
    pub schema: Option<Sp<Value>>,
    /// What the call returns.
    pub outcome: StubOutcome,
    /// The partition it belongs to, when no registered tool says.
    pub partition: Option<Sp<String>>,
    /// Only for calls of this node (`http` stubs name their node).
    pub node: Option<Sp<String>>,
    /// Where it is written.
    pub loc: Loc,
}

/// A stub's outcome.
#[derive(Clone, Debug)]
pub enum StubOutcome {
    /// The tool returns this.
    Result(Value),
    /// The tool fails: `type` is `timeout`, `execution_error`,
    /// `not_found` or `validation_error`.
    Error {
        /// The failure type.
        kind: String,
        /// Its message.
        message: String,
    },
}

/// The failure types a stub may give.
pub(crate) const STUB_ERRORS: &[&str] = &[
    "timeout",
    "execution_error",
    "not_found",
    "validation_error",
];

/// State fields with the values given for them.
pub(crate) type Fields = Vec<(Sp<String>, Sp<Value>)>;

/// `expect:`. Only what is written is checked.
#[derive(Debug, Default)]
pub struct Expect {
    /// The nodes run, in order.
    pub path: Option<Sp<Vec<Sp<String>>>>,
    /// The nodes run, as a set.
    pub nodes: Option<NodesExpect>,
    /// The value each router (a node with a conditional edge) routed on,
    /// in order of its runs; one value checks its last run.
    pub routes: Vec<(Sp<String>, Sp<Vec<String>>)>,
    /// Tool calls, in order (a subsequence of those made).
    pub tool_calls: Option<Sp<Vec<CallExpect>>>,
    /// State fields after the turn.
    pub state: Vec<(Sp<String>, Sp<Value>)>,
    /// State fields after a node's (last) step.
    pub after: Vec<(Sp<String>, Fields)>,
    /// The answer.
    pub answer: Option<Sp<AnswerExpect>>,
    /// How the turn ended.
    pub status: Option<Sp<Status>>,
    /// Text the run's error contains (failed runs).
    pub error: Option<Sp<String>>,
    /// The interrupts the run paused at (partial match, in order).
    pub interrupts: Option<Sp<Vec<Value>>>,
    /// Parts of the AI SDK stream.
    pub stream: Option<StreamExpect>,
    /// The stream keeps the AI SDK's rules.
    pub aisdk_valid: Option<Sp<bool>>,
    /// Criteria a judge model checks the answer against (only when one is
    /// configured; otherwise reported as not judged).
    pub judge: Vec<Sp<String>>,
}

/// `nodes:`.
#[derive(Debug, Default)]
pub struct NodesExpect {
    /// Exactly these nodes ran (in any order).
    pub set: Option<Sp<Vec<Sp<String>>>>,
    /// These nodes ran (others may have too).
    pub includes: Vec<Sp<String>>,
    /// These nodes did not run.
    pub excludes: Vec<Sp<String>>,
}

/// One expected tool call.
#[derive(Debug)]
pub struct CallExpect {
    /// The tool.
    pub name: Sp<String>,
    /// Arguments it contains (or exactly has, with `exact`).
    pub args: Option<Sp<Value>>,
    /// Arguments compared exactly, not partially.
    pub exact: bool,
    /// The node that made it.
    pub node: Option<Sp<String>>,
    /// Where it is written.
    pub loc: Loc,
}

/// `answer:`: every matcher given must hold.
#[derive(Debug, Default)]
pub struct AnswerExpect {
    /// The whole answer.
    pub equals: Option<String>,
    /// Texts it contains.
    pub contains: Vec<String>,
    /// Texts it does not contain.
    pub excludes: Vec<String>,
    /// A regular expression it matches.
    pub regex: Option<regex::Regex>,
    /// A value at a JSON path of the answer read as JSON.
    pub json_path: Option<(String, Value)>,
}

/// How a turn ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// It reached END.
    Completed,
    /// It failed.
    Failed,
    /// It paused for a person.
    Interrupted,
}

impl Status {
    /// The word used in files and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Interrupted => "interrupted",
        }
    }
}

/// `stream:`: chunks, each matched partially.
#[derive(Debug, Default)]
pub struct StreamExpect {
    /// Chunks that appear, in this order.
    pub includes: Vec<Sp<Value>>,
    /// Chunks that never appear.
    pub excludes: Vec<Sp<Value>>,
}
