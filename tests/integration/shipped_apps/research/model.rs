//! A scripted model for graphs/research.yaml that decides only from what
//! each request carries: the node is told by its system prompt, and every
//! answer is computed from the prompt's text (the question, the page text,
//! the facts listed, the numbered sources). So facts, ratings, coverage,
//! gaps and citations only come out right if the runtime really passes
//! that information along.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use serde_json::json;
use stategraph::internals::llm::scripted::{ScriptedModel, Turn};
use stategraph::internals::llm::{ChatMessage, ChatRequest, LlmError};

/// The aspects the planner knows: a word stem in the question → the
/// sub-query for it.
const TOPICS: &[(&str, &str)] = &[
    ("efficien", "heat pump efficiency"),
    ("cost", "heat pump installation cost"),
    ("loud", "heat pump noise levels"),
];

/// Words that carry no topic.
const STOPWORDS: &[&str] = &[
    "what", "does", "they", "them", "with", "that", "this", "from", "into", "have", "about",
    "which", "when", "where", "there", "their", "more",
];

/// Words naming the subject rather than an aspect.
const SUBJECT: &[&str] = &["heat", "pump", "pumps"];

/// The gap query the reflect step writes for an uncovered aspect.
pub(crate) fn gap_query(aspect: &str) -> String {
    format!("{aspect} in figures")
}

/// One model call: the node (by its system prompt), the prompt text and
/// the reply.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    pub node: &'static str,
    pub prompt: String,
    pub reply: String,
    /// How many messages the request had (retries carry the invalid answer).
    pub messages: usize,
}

pub(crate) type Calls = Arc<Mutex<Vec<Call>>>;

/// Ratings the model gives a page, by its title: authority, freshness
/// and quality, and relevance if set (otherwise the model computes it from
/// keyword overlap with the question).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Rated {
    pub authority: f64,
    pub freshness: f64,
    pub relevance: Option<f64>,
    pub quality: f64,
}

pub(crate) type Ratings = dyn Fn(&str) -> Option<Rated> + Send + Sync;

/// How the model behaves.
pub(crate) struct Behaviour {
    /// Ratings by page title (default 0.5 each).
    pub ratings: Box<Ratings>,
    /// For pages with these title words, the reading answer is this text.
    pub garbage: Vec<(&'static str, &'static str)>,
    /// The reflect step always judges coverage 0.3 and asks for more.
    pub always_low: bool,
    /// The reflect step judges coverage this (the gaps as it finds them).
    pub coverage: Option<f64>,
    /// For pages with these title words, the reading call fails (a model
    /// error, not an answer).
    pub failing: Vec<&'static str>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            ratings: Box::new(|_| None),
            garbage: Vec::new(),
            always_low: false,
            coverage: None,
            failing: Vec::new(),
        }
    }
}

/// The research graph's nodes, by a marker of their system prompts.
const MARKERS: &[(&str, &str)] = &[
    ("You plan web research", "plan"),
    ("You read one web page for research", "read"),
    ("You review web research in progress", "reflect"),
    (
        "You answer the user's question from the numbered sources",
        "synthesize",
    ),
    ("You suggest follow-up questions", "related"),
];

/// Which node a request comes from, told by its system prompt.
pub(crate) fn node_of(req: &ChatRequest) -> &'static str {
    crate::support::model::node_of(MARKERS, req)
}

/// The model and the log of its calls.
pub(crate) fn model(b: Behaviour) -> (Arc<ScriptedModel>, Calls) {
    let calls: Calls = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&calls);
    let m = ScriptedModel::from_fn(move |req| {
        let node = node_of(req);
        let system = text_of(req.messages.first());
        let last_user = req
            .messages
            .iter()
            .rev()
            .find_map(|m| match m {
                ChatMessage::User { content } => Some(content.clone()),
                _ => None,
            })
            .unwrap_or_default();
        if node == "read" && b.failing.iter().any(|w| title_of(&system).contains(w)) {
            log.lock().unwrap().push(Call {
                node,
                prompt: system,
                reply: String::new(),
                messages: req.messages.len(),
            });
            return Turn::Fail(LlmError::Http {
                status: 503,
                message: "the model is overloaded".into(),
            });
        }
        let (prompt, reply) = match node {
            "plan" => (last_user.clone(), plan(&last_user)),
            "read" => (system.clone(), read(&system, &b)),
            "reflect" => (system.clone(), reflect(&system, b.always_low, b.coverage)),
            "synthesize" => (system.clone(), synthesize(&system)),
            "related" => (last_user.clone(), related(&last_user)),
            _ => {
                return Turn::Fail(LlmError::Scripted(format!("unexpected request: {system}")));
            }
        };
        log.lock().unwrap().push(Call {
            node,
            prompt,
            reply: reply.clone(),
            messages: req.messages.len(),
        });
        if node == "synthesize" {
            Turn::text(reply)
        } else {
            Turn::Raw(reply)
        }
    });
    (Arc::new(m), calls)
}

fn text_of(m: Option<&ChatMessage>) -> String {
    match m {
        Some(ChatMessage::System { content } | ChatMessage::User { content }) => content.clone(),
        _ => String::new(),
    }
}

/// Lower-case words of four letters or more, stopwords left out.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| w.chars().count() >= 4 && !STOPWORDS.contains(&w.as_str()))
        .collect()
}

/// Word stems (first four letters): "installation" and "installing" meet.
fn stems(text: &str) -> BTreeSet<String> {
    words(text)
        .into_iter()
        .map(|w| w.chars().take(4).collect())
        .collect()
}

/// The text after `marker` up to the end of its line.
fn line_after<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    let start = text.find(marker)? + marker.len();
    Some(text[start..].lines().next().unwrap_or("").trim())
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// One sub-query per aspect the question names; the question itself if
/// none.
fn plan(question: &str) -> String {
    let q = question.to_lowercase();
    let mut found: Vec<(usize, &str)> = TOPICS
        .iter()
        .filter_map(|(stem, query)| q.find(stem).map(|at| (at, *query)))
        .collect();
    found.sort_unstable();
    let queries: Vec<&str> = if found.is_empty() {
        vec![question]
    } else {
        found.into_iter().map(|(_, q)| q).collect()
    };
    json!({ "sub_queries": queries }).to_string()
}

/// The title of the page a reading prompt shows.
fn title_of(prompt: &str) -> String {
    let page_line = line_after(prompt, "\nPage: ").unwrap_or_default();
    page_line
        .rsplit_once(" — ")
        .map_or(page_line, |(t, _)| t)
        .to_owned()
}

/// The page's sentences that share a word with the question are its
/// facts; relevance is the share of the question's words the page has.
fn read(prompt: &str, b: &Behaviour) -> String {
    let question = line_after(prompt, "on this question: ").unwrap_or_default();
    let title = title_of(prompt);
    if let Some((_, answer)) = b.garbage.iter().find(|(w, _)| title.contains(w)) {
        return (*answer).to_owned();
    }
    let after_page = &prompt[prompt.find("\nPage: ").map_or(0, |i| i + 7)..];
    let body_start = after_page.find('\n').map_or(after_page.len(), |i| i + 1);
    let body = &after_page[body_start..];
    let body = &body[..body.find("List up to 6 facts").unwrap_or(body.len())];
    let asked = stems(question);
    let facts: Vec<String> = body
        .lines()
        .flat_map(|l| l.split_inclusive(". "))
        .map(str::trim)
        .filter(|s| !s.is_empty() && !stems(s).is_disjoint(&asked))
        .take(6)
        .map(str::to_owned)
        .collect();
    let found = stems(body);
    let relevance = if asked.is_empty() {
        0.0
    } else {
        round2(asked.intersection(&found).count() as f64 / asked.len() as f64)
    };
    let r = (b.ratings)(&title).unwrap_or(Rated {
        authority: 0.5,
        freshness: 0.5,
        relevance: None,
        quality: 0.5,
    });
    json!({
        "facts": facts,
        "authority": r.authority,
        "freshness": r.freshness,
        "relevance": r.relevance.unwrap_or(relevance),
        "quality": r.quality,
    })
    .to_string()
}

/// An aspect is covered when a listed fact mentions one of its topic
/// words; coverage is the covered share, the gaps are the uncovered
/// aspects as new searches (`judged`, when set, is the coverage given).
fn reflect(prompt: &str, always_low: bool, judged: Option<f64>) -> String {
    let aspects: Vec<&str> = line_after(prompt, "Aspects a complete answer needs: ")
        .map(|l| l.split("; ").collect())
        .unwrap_or_default();
    let searches: Vec<&str> = line_after(prompt, "Searches made so far: ")
        .map(|l| l.split("; ").collect())
        .unwrap_or_default();
    if always_low {
        let last = searches.last().copied().unwrap_or("heat pumps");
        return json!({"coverage": 0.3, "gaps": [format!("more on {last}")]}).to_string();
    }
    let facts: Vec<BTreeSet<String>> = prompt
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .map(|l| stems(l.rsplit_once(" (").map_or(l, |(t, _)| t)))
        .collect();
    let uncovered: Vec<&str> = aspects
        .iter()
        .copied()
        .filter(|a| {
            let topic: BTreeSet<String> = words(a)
                .into_iter()
                .filter(|w| !SUBJECT.contains(&w.as_str()))
                .map(|w| w.chars().take(4).collect())
                .collect();
            !facts.iter().any(|f| !f.is_disjoint(&topic))
        })
        .collect();
    let coverage = match judged {
        Some(c) => c,
        None if aspects.is_empty() => 0.0,
        None => round2((aspects.len() - uncovered.len()) as f64 / aspects.len() as f64),
    };
    let gaps: Vec<String> = uncovered.iter().map(|a| gap_query(a)).collect();
    json!({ "coverage": coverage, "gaps": gaps }).to_string()
}

/// A numbered source of the synthesis prompt.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Numbered {
    pub n: u32,
    pub title: String,
    pub url: String,
    pub facts: Vec<String>,
}

/// The sources the synthesis prompt numbers, with their facts.
pub(crate) fn numbered(prompt: &str) -> Vec<Numbered> {
    let mut out: Vec<Numbered> = Vec::new();
    let Some(start) = prompt.find("\nSources:") else {
        return out;
    };
    for line in prompt[start..].lines() {
        if let Some(fact) = line.strip_prefix("- ") {
            if let Some(last) = out.last_mut() {
                last.facts.push(fact.to_owned());
            }
        } else if let Some(rest) = line.strip_prefix('[')
            && let Some((n, rest)) = rest.split_once("] ")
            && let Ok(n) = n.parse()
        {
            let (title, url) = rest.rsplit_once(" — ").unwrap_or(("", rest));
            out.push(Numbered {
                n,
                title: title.to_owned(),
                url: url.to_owned(),
                facts: Vec::new(),
            });
        }
    }
    out
}

/// The answer uses the facts that give figures (a digit), each cited by
/// its source's number; sources without such facts are not cited. It also
/// cites a number no source has, which must come to nothing.
fn synthesize(prompt: &str) -> String {
    let sources = numbered(prompt);
    if sources.is_empty() {
        return "The research found nothing to answer from: no page could be read.".into();
    }
    let mut text = String::from("Here is what the research found.");
    for s in &sources {
        for f in s
            .facts
            .iter()
            .filter(|f| f.chars().any(|c| c.is_ascii_digit()))
        {
            text.push_str(&format!(" {} [{}].", f.trim_end_matches('.'), s.n));
        }
    }
    if let Some(missing) = line_after(prompt, "Not covered by the research: ") {
        text.push_str(&format!(" Not covered: {missing}."));
    }
    text.push_str(" Subsidies vary by country [42].");
    text
}

/// Three questions built from the question (and what was not covered).
fn related(prompt: &str) -> String {
    let question = line_after(prompt, "Question: ")
        .unwrap_or_default()
        .trim_end_matches('?');
    let mut questions = vec![
        format!("Which sources compare: {question}?"),
        format!("What changed recently: {question}?"),
    ];
    match line_after(prompt, "Not covered: ") {
        Some(gaps) => questions.push(format!("What is known about {gaps}?")),
        None => questions.push("Which heat pumps are the quietest?".into()),
    }
    json!({ "questions": questions }).to_string()
}

#[test]
fn the_model_reads_what_the_prompts_carry() {
    let q = "How efficient are heat pumps, what does installing one cost, and how loud are they?";
    assert_eq!(
        plan(q),
        json!({"sub_queries": ["heat pump efficiency", "heat pump installation cost", "heat pump noise levels"]}).to_string()
    );
    let prompt = format!(
        "You read one web page for research on this question: {q}\nIts aspects: a; b\n\nPage: T — http://x/p/t\n\nHeat pumps are efficient. Tomatoes grow.\nThe cost is 5 euros.\n\nList up to 6 facts the page states"
    );
    let r: serde_json::Value = serde_json::from_str(&read(&prompt, &Behaviour::default())).unwrap();
    assert_eq!(
        r["facts"],
        json!(["Heat pumps are efficient.", "The cost is 5 euros."])
    );
    assert_eq!(r["relevance"], json!(0.67));
    let reflect_prompt = "Aspects a complete answer needs: heat pump efficiency; heat pump noise levels\nSearches made so far: x\n\nFacts found:\n- Efficiency is high. (http://a)\n";
    let v: serde_json::Value = serde_json::from_str(&reflect(reflect_prompt, false, None)).unwrap();
    assert_eq!(
        v,
        json!({"coverage": 0.5, "gaps": ["heat pump noise levels in figures"]})
    );
    let synth = "Answer.\n\nSources:\n[1] A — http://a\n- It is 3 to 4.\n[2] B — http://b\n- No figures here.\n";
    assert_eq!(
        synthesize(synth),
        "Here is what the research found. It is 3 to 4 [1]. Subsidies vary by country [42]."
    );
}
