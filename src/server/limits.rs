//! Per-user limits (`[limits]`): a request rate, a daily token quota and a
//! daily cost cap, each answered with 429, a `retry-after` in seconds and a
//! stable code.
//!
//! - **Rate** (`requests_per_minute`, code `rate_limited`): a token bucket
//!   per user, in this process's memory — a burst of up to the limit, then
//!   one request per `60 / limit` seconds. Every API route counts; health
//!   and metrics are not behind it (see [`super::app`]). Several instances
//!   each allow the rate (a load balancer spreading a user's requests over
//!   them lets more through); sharing buckets would need a round trip to the
//!   database per request, which the limit exists to avoid. Memory is
//!   bounded: a bucket idle long enough to be full again is the same as no
//!   bucket, so those are dropped whenever the map has doubled.
//! - **Daily tokens** (`daily_tokens`, code `token_quota_exceeded`): what
//!   the user's runs created since midnight UTC used, read from the store
//!   ([`crate::store::RunStore::usage_since`]) so that it survives restarts
//!   and counts runs of every instance sharing the database. Checked before
//!   a request starts a run (a chat turn, a fork); reading chats and runs
//!   stays allowed. The answer is cached per user for [`FRESH`]; a run of
//!   the user ending here drops the cached answer (see [`ServerObserver`]),
//!   so this instance never lets a user past a quota its own runs spent. A
//!   run in flight counts when it ends: the run that crosses the quota
//!   finishes, the next is refused.
//! - **Daily cost** (`daily_cost_usd`, code `cost_limit`): the same, over
//!   the cost recorded on the user's runs (nano-dollars, at the configured
//!   prices of the models they called): the same read answers both.
//!
//! All default to 0, which turns them off.

use crate::server::Code;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{FromRequestParts, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::auth::User;
use super::error::ApiError;
use super::metrics::Metrics;
use crate::config::LimitsConfig;
use crate::events::{Event, Usage, now_micros};
use crate::runs::RunObserver;
use crate::store::Store;

/// How long a user's token count read from the store is trusted (runs of
/// other instances show up within this).
const FRESH: Duration = Duration::from_secs(5);

/// A map is swept for idle entries once it holds this many (or twice as
/// many as after the last sweep).
const SWEEP_AT: usize = 1024;

/// One day in µs.
const DAY_MICROS: u64 = 86_400 * 1_000_000;

/// The limits of one server process.
#[derive(Debug)]
pub struct Limits {
    rate: Option<RateLimiter>,
    quota: Option<Quota>,
}

impl Limits {
    /// Limits as configured (0 turns each off).
    pub fn new(config: &LimitsConfig) -> Self {
        Self {
            rate: (config.requests_per_minute > 0)
                .then(|| RateLimiter::new(config.requests_per_minute)),
            quota: Quota::new(
                (config.daily_tokens > 0).then_some(config.daily_tokens),
                config.daily_cost_nano_usd(),
            ),
        }
    }

    /// Counts one request of `user` against the rate.
    ///
    /// # Errors
    /// 429 `rate_limited`, with the seconds until a request is allowed.
    pub fn admit(&self, user: &str) -> Result<(), ApiError> {
        let Some(rate) = &self.rate else {
            return Ok(());
        };
        rate.take(user, Instant::now()).map_err(|wait| {
            ApiError::too_many(
                Code::RateLimited,
                format!(
                    "too many requests: at most {} a minute; retry in {wait} s",
                    rate.per_minute
                ),
                wait,
            )
        })
    }

    /// Whether `user` may start a run: their runs today (UTC) used less
    /// than the daily token quota and cost less than the daily cost cap.
    ///
    /// # Errors
    /// 429 `token_quota_exceeded` or `cost_limit` (until midnight UTC), or
    /// the store failed.
    pub async fn check_daily(&self, store: &dyn Store, user: &str) -> Result<(), ApiError> {
        let Some(quota) = &self.quota else {
            return Ok(());
        };
        let now = now_micros();
        let day = now - now % DAY_MICROS;
        let spent = match quota.cached(user, day) {
            Some(spent) => spent,
            None => {
                let usage = store.usage_since(user, day).await?;
                let spent = Spent {
                    tokens: usage.total(),
                    cost: usage.cost_nano_usd,
                };
                quota.remember(user, day, spent);
                spent
            }
        };
        let wait = (day + DAY_MICROS - now).div_ceil(1_000_000);
        if let Some(cap) = quota.tokens
            && spent.tokens >= cap
        {
            return Err(ApiError::too_many(
                Code::TokenQuotaExceeded,
                format!(
                    "the daily token quota ({cap} tokens) is used up; it renews at midnight UTC"
                ),
                wait,
            ));
        }
        if let Some(cap) = quota.cost
            && spent.cost >= cap
        {
            return Err(ApiError::too_many(
                Code::CostLimit,
                format!(
                    "the daily cost limit ({}) is spent ({} today); it renews at midnight UTC",
                    usd(cap),
                    usd(spent.cost)
                ),
                wait,
            ));
        }
        Ok(())
    }

    /// Forgets what is cached of `user`'s spending (a run of theirs ended).
    fn forget(&self, user: &str) {
        if let Some(q) = &self.quota {
            q.known
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .map
                .remove(user);
        }
    }
}

/// Nano-dollars as US dollars for a person: cents from a dollar up, below
/// that up to six decimals (a small cap is still legible).
fn usd(nano: u64) -> String {
    let d = nano as f64 / 1e9;
    if d >= 1.0 {
        return format!("US${d:.2}");
    }
    let text = format!("{d:.6}");
    let text = text.trim_end_matches('0');
    let decimals = text.split('.').nth(1).map_or(0, str::len);
    format!("US${text}{}", "0".repeat(2usize.saturating_sub(decimals)))
}

/// Token buckets by user.
#[derive(Debug)]
struct RateLimiter {
    per_minute: u32,
    /// Tokens added per second.
    refill: f64,
    buckets: Mutex<Swept<Bucket>>,
}

/// A user's bucket: `tokens` as of `at`.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// A map swept of stale entries whenever it has doubled since the last sweep.
#[derive(Debug)]
struct Swept<T> {
    map: HashMap<String, T>,
    sweep_at: usize,
}

impl<T> Swept<T> {
    fn new() -> Self {
        Self {
            map: HashMap::new(),
            sweep_at: SWEEP_AT,
        }
    }

    /// Drops the entries `keep` refuses once the map is due for a sweep.
    fn sweep(&mut self, keep: impl FnMut(&T) -> bool) {
        if self.map.len() < self.sweep_at {
            return;
        }
        let mut keep = keep;
        self.map.retain(|_, v| keep(v));
        self.sweep_at = (self.map.len() * 2).max(SWEEP_AT);
    }
}

impl RateLimiter {
    fn new(per_minute: u32) -> Self {
        Self {
            per_minute,
            refill: f64::from(per_minute) / 60.0,
            buckets: Mutex::new(Swept::new()),
        }
    }

    /// The bucket's tokens at `now` (refilled, at most full).
    fn level(&self, b: &Bucket, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        (b.tokens + elapsed * self.refill).min(f64::from(self.per_minute))
    }

    /// Takes a token of `user`'s bucket at `now`; when it is empty, the
    /// whole seconds until it holds one.
    fn take(&self, user: &str, now: Instant) -> Result<(), u64> {
        let full = f64::from(self.per_minute);
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if !buckets.map.contains_key(user) {
            buckets.sweep(|b| self.level(b, now) < full);
        }
        let bucket = buckets.map.entry(user.to_owned()).or_insert(Bucket {
            tokens: full,
            at: now,
        });
        let tokens = self.level(bucket, now);
        *bucket = Bucket { tokens, at: now };
        if tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        Err(((1.0 - tokens) / self.refill).ceil().max(1.0) as u64)
    }
}

/// The daily token quota and cost cap, and what is known of each user's
/// spending.
#[derive(Debug)]
struct Quota {
    /// Tokens a day, if limited.
    tokens: Option<u64>,
    /// Nano-dollars a day, if limited.
    cost: Option<u64>,
    known: Mutex<Swept<Known>>,
}

/// What a user's runs of a day used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Spent {
    tokens: u64,
    /// Nano-dollars.
    cost: u64,
}

/// A user's spending on `day` (its first µs), read at `at`.
#[derive(Clone, Copy, Debug)]
struct Known {
    day: u64,
    spent: Spent,
    at: Instant,
}

impl Quota {
    /// A quota, or none when neither limit is set.
    fn new(tokens: Option<u64>, cost: Option<u64>) -> Option<Self> {
        (tokens.is_some() || cost.is_some()).then(|| Self {
            tokens,
            cost,
            known: Mutex::new(Swept::new()),
        })
    }

    /// Whether `spent` reaches a limit.
    fn exhausted(&self, spent: Spent) -> bool {
        self.tokens.is_some_and(|cap| spent.tokens >= cap)
            || self.cost.is_some_and(|cap| spent.cost >= cap)
    }

    /// Whether what is known may be used on `day`: read within [`FRESH`],
    /// or already over a limit (spending never goes down within a day).
    fn trusted(&self, k: &Known, day: u64) -> bool {
        k.day == day && (self.exhausted(k.spent) || k.at.elapsed() < FRESH)
    }

    /// What is known of `user` on `day`, if it may be used.
    fn cached(&self, user: &str, day: u64) -> Option<Spent> {
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known
            .map
            .get(user)
            .filter(|k| self.trusted(k, day))
            .map(|k| k.spent)
    }

    fn remember(&self, user: &str, day: u64, spent: Spent) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.sweep(|k| self.trusted(k, day));
        known.map.insert(
            user.to_owned(),
            Known {
                day,
                spent,
                at: Instant::now(),
            },
        );
    }
}

/// Applies the request rate to every route it wraps: the caller, as
/// authentication resolves them, spends one request. A request that does
/// not authenticate passes on, to be refused by its handler as before.
pub(super) async fn rate_limit(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    if state.limits.rate.is_none() {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let user = User::from_request_parts(&mut parts, &state).await;
    if let Ok(user) = user
        && let Err(e) = state.limits.admit(&user.0)
    {
        return e.into_response();
    }
    next.run(Request::from_parts(parts, body)).await
}

/// What a server hears of its runs: the metrics, and the daily limits,
/// which forget a user's cached spending when one of their runs ends.
pub(super) struct ServerObserver {
    pub(super) metrics: Arc<Metrics>,
    pub(super) limits: Arc<Limits>,
}

impl RunObserver for ServerObserver {
    fn event(&self, graph: &str, event: &Event) {
        RunObserver::event(&*self.metrics, graph, event);
    }

    fn finished(&self, graph: &str, outcome: &str) {
        RunObserver::finished(&*self.metrics, graph, outcome);
    }

    fn first_visible(&self, graph: &str, seconds: f64) {
        RunObserver::first_visible(&*self.metrics, graph, seconds);
    }

    fn spent(&self, user: &str, _usage: Usage) {
        self.limits.forget(user);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_allows_a_burst_then_one_request_per_interval() {
        let r = RateLimiter::new(6); // one per 10 s
        let t0 = Instant::now();
        for _ in 0..6 {
            assert_eq!(r.take("alice", t0), Ok(()));
        }
        assert_eq!(r.take("alice", t0), Err(10));
        assert_eq!(r.take("bob", t0), Ok(()), "each user has a bucket");
        assert_eq!(r.take("alice", t0 + Duration::from_secs(4)), Err(6));
        assert_eq!(r.take("alice", t0 + Duration::from_secs(10)), Ok(()));
        assert_eq!(r.take("alice", t0 + Duration::from_secs(10)), Err(10));
    }

    #[test]
    fn idle_full_buckets_are_swept_so_memory_stays_bounded() {
        let r = RateLimiter::new(60);
        let t0 = Instant::now();
        for i in 0..SWEEP_AT {
            assert_eq!(r.take(&format!("u{i}"), t0), Ok(()));
        }
        // A minute later every bucket is full again: the next new user
        // sweeps them all away.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(r.take("newcomer", later), Ok(()));
        let buckets = r.buckets.lock().unwrap();
        assert_eq!(buckets.map.len(), 1);
        assert!(buckets.map.contains_key("newcomer"));
    }

    #[test]
    fn a_busy_bucket_survives_a_sweep() {
        let r = RateLimiter::new(60);
        let t0 = Instant::now();
        for _ in 0..60 {
            let _ = r.take("busy", t0);
        }
        for i in 0..SWEEP_AT {
            let _ = r.take(&format!("u{i}"), t0 + Duration::from_secs(1));
        }
        assert_eq!(r.take("busy", t0 + Duration::from_secs(1)), Ok(()));
        assert_eq!(r.take("busy", t0 + Duration::from_secs(1)), Err(1));
    }

    #[test]
    fn the_quota_cache_trusts_fresh_reads_and_exhaustion_only() {
        let q = Quota::new(Some(100), None).unwrap();
        let tokens = |tokens| Spent { tokens, cost: 0 };
        q.remember("alice", 0, tokens(40));
        assert_eq!(q.cached("alice", 0), Some(tokens(40)));
        assert_eq!(q.cached("alice", DAY_MICROS), None, "a new day reads again");
        assert_eq!(q.cached("bob", 0), None);
        q.known.lock().unwrap().map.get_mut("alice").unwrap().at = Instant::now() - FRESH;
        assert_eq!(q.cached("alice", 0), None, "a stale read is read again");
        q.remember("alice", 0, tokens(100));
        q.known.lock().unwrap().map.get_mut("alice").unwrap().at = Instant::now() - FRESH;
        assert_eq!(
            q.cached("alice", 0),
            Some(tokens(100)),
            "spent stays spent all day"
        );
    }

    #[test]
    fn dollars_read_as_cents_or_as_small_amounts() {
        assert_eq!(usd(5_000_000_000), "US$5.00");
        assert_eq!(usd(12_345_000_000), "US$12.35");
        assert_eq!(usd(500_000_000), "US$0.50");
        assert_eq!(usd(4_000_000), "US$0.004");
        assert_eq!(usd(4_180_000), "US$0.00418");
        assert_eq!(usd(0), "US$0.00");
    }

    #[test]
    fn a_cost_cap_alone_is_a_quota_and_exhaustion_by_cost_is_trusted() {
        assert!(Quota::new(None, None).is_none(), "no limit, no reads");
        let q = Quota::new(None, Some(5_000)).unwrap();
        let spent = |cost| Spent {
            tokens: 1_000_000,
            cost,
        };
        assert!(!q.exhausted(spent(4_999)), "tokens are not limited");
        assert!(q.exhausted(spent(5_000)));
        q.remember("alice", 0, spent(5_000));
        q.known.lock().unwrap().map.get_mut("alice").unwrap().at = Instant::now() - FRESH;
        assert_eq!(q.cached("alice", 0), Some(spent(5_000)));
    }
}
