//! The reviewer: asks the API server who a bearer token belongs to (TokenReview) and whether
//! that user may read what a request needs (SubjectAccessReview), as Kubernetes add-ons do it,
//! through the answer caches ([`super::flight`]) and within the review budgets:
//!
//! - a TokenReview of a token never seen (or pushed out of the cache) spends first from its
//!   address's bucket, an [`ADDRESS_SHARE`]th of the new-token rate, then from one bucket shared
//!   by everyone ([`Settings::new_token_rate`]); a known token's re-check, and every
//!   SubjectAccessReview, spends from its user's bucket ([`Settings::caller_rate`]);
//! - at most [`Settings::max_in_flight`] reviews are in flight at once, of which a quarter are
//!   kept for known callers: the TokenReviews of new tokens take at most the rest, and one
//!   address at most an [`ADDRESS_SHARE`]th of that;
//! - beyond a budget the answer is 429 or 503 with `Retry-After`, never "allowed".
//!
//! So a few pods that send garbage tokens spend their addresses' shares, and a new legitimate
//! token from elsewhere, and every known caller, still gets its review.
//!
//! A thin shell: every decision is the API server's or [`crate::apps::auth::access`]'s; the calls are
//! [`super::api`]'s. Tokens are never logged, and never kept beyond the request (or the
//! watch stream) that carries them.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, header};
use futures::StreamExt;
use kube::Client;
use tokio::sync::{OnceCell, OwnedSemaphorePermit, Semaphore};

use super::api::{self, Call};
use super::cache::CacheKey;
use super::flight::Flight;
use super::limits::{Buckets, InFlight, Rate, TokenBucket};
use super::refusal::{Budget, Refusal};
use crate::apps::args::StatusApiArgs;
use crate::apps::auth::access::{self, Access, Attributes, Identity, TokenHash, User};
use crate::apps::metrics::StatusMetrics;
use crate::cluster::client::{self, ClientArgs};
use crate::locks::lock;
use crate::server::trace::REFUSED_TARGET;

/// Most callers with a review bucket of their own (beyond, they share one).
const MAX_CALLER_BUCKETS: usize = 4096;
/// Reviews one cluster-wide `/apps` of a namespace-scoped caller keeps in flight at a time.
const FAN_OUT: usize = 4;
/// Most addresses with a new-token bucket of their own (beyond, they share one).
const MAX_ADDRESS_BUCKETS: usize = 4096;
/// One address may use this fraction (1/N) of the new-token rate and of the new tokens' reviews
/// in flight: it takes eight pods together to spend the whole budget, and the threat this
/// guards against is "any four pods".
pub const ADDRESS_SHARE: u32 = 8;

/// An authenticated caller: who the TokenReview said it is, and the token itself, kept only for
/// as long as the request (or the watch stream) that carries it, so an open stream can re-check it.
#[derive(Clone)]
pub struct Caller {
    token: Arc<str>,
    /// Who the TokenReview said the caller is.
    pub user: User,
}

impl std::fmt::Debug for Caller {
    /// The user only: the token is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("user", &self.user.username)
            .finish_non_exhaustive()
    }
}

/// Where the reviewer gets its client: one given (tests), or connected on first use.
pub enum ClientSource {
    Ready(Client),
    Connect(Box<ClientArgs>),
}

/// Cache, budget and timeout settings of a [`Reviewer`] (`serve` takes them from the flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// How long answers are reused.
    pub ttl: Duration,
    /// How often an open watch stream re-checks its caller.
    pub recheck: Duration,
    /// Most cached answers, for tokens and for access decisions each.
    pub cache_size: usize,
    /// Most bytes of cached answers, for tokens and for access decisions each.
    pub cache_bytes: usize,
    /// Timeout of one review.
    pub timeout: Duration,
    /// Audiences a token must be valid for (empty: the API server's own).
    pub audiences: Arc<[String]>,
    /// TokenReviews of tokens never seen, for all callers together.
    pub new_token_rate: Rate,
    /// Reviews of one caller (by username).
    pub caller_rate: Rate,
    /// Most reviews in flight at once.
    pub max_in_flight: usize,
}

impl Settings {
    /// The settings the flags describe.
    pub fn from_args(args: &StatusApiArgs) -> Self {
        let wide = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        Self {
            ttl: args.status_auth_cache_ttl,
            recheck: args.status_watch_recheck,
            cache_size: wide(args.status_auth_cache_size),
            cache_bytes: wide(args.status_auth_cache_bytes),
            timeout: args.status_auth_timeout,
            audiences: args.status_auth_audiences.clone().into(),
            new_token_rate: Rate {
                per_second: args.status_auth_new_token_rate,
                burst: args.status_auth_new_token_rate.saturating_mul(2),
            },
            caller_rate: Rate {
                per_second: args.status_auth_caller_rate,
                burst: args.status_auth_caller_rate.saturating_mul(5),
            },
            max_in_flight: wide(args.status_auth_max_in_flight),
        }
    }
}

impl Default for Settings {
    /// What the flags' defaults give (a test compares them).
    fn default() -> Self {
        let secs = Duration::from_secs;
        Self {
            ttl: secs(10),
            recheck: secs(10),
            cache_size: 4096,
            cache_bytes: 4 << 20,
            timeout: secs(2),
            audiences: Arc::new([]),
            new_token_rate: Rate {
                per_second: 20,
                burst: 40,
            },
            caller_rate: Rate {
                per_second: 20,
                burst: 100,
            },
            max_in_flight: 16,
        }
    }
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// What a review spends from the budgets.
#[derive(Debug, Clone, Copy)]
enum Spend<'a> {
    /// Nothing: the request already spent for it.
    Paid,
    /// From the bucket of tokens never seen, shared by everyone, after the bucket of the
    /// address it came from (when known).
    NewToken(Option<&'a str>),
    /// From this user's bucket.
    Caller(&'a str),
}

/// What a review holds while it is in flight: its place among all reviews, and for a new
/// token its place among new tokens' and its address's.
struct Permit {
    _all: OwnedSemaphorePermit,
    _new: Option<OwnedSemaphorePermit>,
    _address: Option<AddressPlace>,
}

/// One review of a new token from an address, counted in [`Reviewer::address_flights`] until
/// dropped.
struct AddressPlace {
    flights: Arc<Mutex<InFlight>>,
    address: String,
}

impl Drop for AddressPlace {
    fn drop(&mut self) {
        lock(&self.flights).end(&self.address);
    }
}

/// The share of `rate` one address may use: an [`ADDRESS_SHARE`]th, at least one review a
/// second and a burst of one.
fn address_rate(rate: Rate) -> Rate {
    Rate {
        per_second: (rate.per_second / ADDRESS_SHARE).max(1),
        burst: (rate.burst / ADDRESS_SHARE).max(1),
    }
}

/// How many of `max_in_flight` reviews new tokens may hold: all but a quarter (the known
/// callers'), at least one.
fn new_token_flights(max_in_flight: usize) -> usize {
    (max_in_flight - max_in_flight / 4).max(1)
}

/// Asks the API server who a token belongs to and what it may read, through the caches.
pub struct Reviewer {
    source: ClientSource,
    client: OnceCell<Client>,
    settings: Settings,
    tokens: Arc<Flight<Identity>>,
    access: Arc<Flight<Access>>,
    new_tokens: Mutex<TokenBucket>,
    addresses: Mutex<Buckets>,
    callers: Mutex<Buckets>,
    in_flight: Arc<Semaphore>,
    new_in_flight: Arc<Semaphore>,
    address_flights: Arc<Mutex<InFlight>>,
    metrics: StatusMetrics,
}

impl std::fmt::Debug for Reviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reviewer")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Reviewer {
    /// A reviewer asking through `source`.
    pub fn new(source: ClientSource, settings: Settings, metrics: StatusMetrics) -> Self {
        let (size, bytes, ttl) = (settings.cache_size, settings.cache_bytes, settings.ttl);
        let tokens = Flight::new(size, bytes, ttl, metrics.cache_bytes("token"));
        let access = Flight::new(size, bytes, ttl, metrics.cache_bytes("access"));
        let callers = Buckets::new(settings.caller_rate, MAX_CALLER_BUCKETS, now());
        let per_address = address_rate(settings.new_token_rate);
        let addresses = Buckets::new(per_address, MAX_ADDRESS_BUCKETS, now());
        let new_flights = new_token_flights(settings.max_in_flight);
        let share = usize::try_from(ADDRESS_SHARE).unwrap_or(usize::MAX);
        Self {
            source,
            client: OnceCell::new(),
            new_tokens: Mutex::new(TokenBucket::full(now())),
            addresses: Mutex::new(addresses),
            callers: Mutex::new(callers),
            in_flight: Arc::new(Semaphore::new(settings.max_in_flight)),
            new_in_flight: Arc::new(Semaphore::new(new_flights)),
            address_flights: Arc::new(Mutex::new(InFlight::new(new_flights / share))),
            tokens: Arc::new(tokens),
            access: Arc::new(access),
            settings,
            metrics,
        }
    }

    /// How often an open stream re-checks its caller.
    pub fn recheck(&self) -> Duration {
        self.settings.recheck
    }

    async fn client(&self) -> Result<Client, Refusal> {
        let timeout = self.settings.timeout;
        let client = match &self.source {
            ClientSource::Ready(client) => return Ok(client.clone()),
            // Without the version probe: an unreachable API server shows in each review (bounded
            // by its timeout), not in a serialized connect.
            ClientSource::Connect(args) => {
                let connect = || async move {
                    client::connect(args, timeout, false)
                        .await
                        .map_err(|e| e.to_string())
                };
                self.client.get_or_try_init(connect).await
            }
        };
        client.cloned().map_err(|error| {
            tracing::warn!(error = %error, "no client for the status API's access reviews");
            Refusal::Unavailable(error)
        })
    }

    async fn call(&self) -> Result<Call, Refusal> {
        Ok(Call {
            client: self.client().await?,
            timeout: self.settings.timeout,
            metrics: self.metrics.clone(),
        })
    }

    /// Let one review of `kind` start: take its in-flight places, then spend from its budgets
    /// (a request refused for want of a place spends nothing).
    fn admit(&self, kind: &'static str, spend: Spend<'_>) -> Result<Permit, Refusal> {
        let overloaded = || {
            self.metrics.refuse(kind, "overloaded");
            Refusal::Overloaded
        };
        let (address, new) = match spend {
            Spend::NewToken(from) => {
                let address = match from {
                    Some(from) => Some(self.address_place(from).ok_or_else(|| {
                        self.metrics.refuse(kind, "rate_limited");
                        Refusal::RateLimited {
                            budget: Budget::Address,
                            retry_after: Duration::from_secs(1),
                        }
                    })?),
                    None => None,
                };
                let new = self.new_in_flight.clone().try_acquire_owned();
                (address, Some(new.map_err(|_| overloaded())?))
            }
            Spend::Paid | Spend::Caller(_) => (None, None),
        };
        let all = self.in_flight.clone().try_acquire_owned();
        let permit = Permit {
            _all: all.map_err(|_| overloaded())?,
            _new: new,
            _address: address,
        };
        let spent = match spend {
            Spend::Paid => Ok(()),
            Spend::NewToken(from) => self.spend_new_token(from),
            Spend::Caller(user) => lock(&self.callers)
                .take(user, now())
                .map_err(|wait| (Budget::Caller, wait)),
        };
        let Err((budget, retry_after)) = spent else {
            return Ok(permit);
        };
        self.metrics.refuse(kind, "rate_limited");
        Err(Refusal::RateLimited {
            budget,
            retry_after,
        })
    }

    /// A place for one more review of a new token from `address`, unless it has its share in
    /// flight already.
    fn address_place(&self, address: &str) -> Option<AddressPlace> {
        lock(&self.address_flights)
            .begin(address)
            .then(|| AddressPlace {
                flights: self.address_flights.clone(),
                address: address.to_owned(),
            })
    }

    /// Spend one new-token review: from `from`'s bucket first (so one address cannot empty the
    /// shared one), then from the shared bucket.
    fn spend_new_token(&self, from: Option<&str>) -> Result<(), (Budget, Duration)> {
        if let Some(address) = from {
            lock(&self.addresses)
                .take(address, now())
                .map_err(|wait| (Budget::Address, wait))?;
        }
        lock(&self.new_tokens)
            .take(self.settings.new_token_rate, now())
            .map_err(|wait| (Budget::NewTokens, wait))
    }

    /// The caller of a request with these headers, sent `from` this address when known: 401
    /// without a usable token or with one the API server rejects (an oversized one is refused
    /// without asking).
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        from: Option<IpAddr>,
    ) -> Result<Caller, Refusal> {
        let header = headers
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes);
        let token = access::bearer(header).map_err(|e| Refusal::Unauthenticated(e.to_string()))?;
        let from = from.map(|ip| ip.to_string());
        self.authenticate_token(Arc::from(token), from.as_deref())
            .await
    }

    /// Check `caller`'s token again (an open stream does so every re-check period).
    pub async fn reauthenticate(&self, caller: &Caller) -> Result<Caller, Refusal> {
        self.authenticate_token(caller.token.clone(), None).await
    }

    async fn authenticate_token(
        &self,
        token: Arc<str>,
        from: Option<&str>,
    ) -> Result<Caller, Refusal> {
        let hash = TokenHash::of(&token);
        let call = self.call().await?;
        let review = {
            let (token, audiences) = (token.to_string(), self.settings.audiences.clone());
            move || api::token_review(call, token, audiences)
        };
        // A token last known as a user's spends from that user's budget: a flood of new
        // tokens cannot stop the re-checks of known callers.
        let admit = |last: Option<Identity>| match &last {
            Some(Identity::User(user)) => self.admit("token", Spend::Caller(&user.username)),
            _ => self.admit("token", Spend::NewToken(from)),
        };
        let key = CacheKey::token(&hash);
        match self.tokens.get_or_fetch(key, admit, review).await? {
            Identity::User(user) => Ok(Caller { token, user }),
            Identity::Rejected => Err(Refusal::Unauthenticated(self.rejected())),
        }
    }

    /// The 401 sentence for a token the API server does not accept (its reason is logged at
    /// debug, never relayed).
    fn rejected(&self) -> String {
        let audiences = &self.settings.audiences;
        match audiences.first() {
            None => "the API server does not accept this token; use a current ServiceAccount or user token".into(),
            Some(first) => format!(
                "the API server does not accept this token for the audience {}; use a current token minted for it (`kubectl create token SA --audience {first}`)",
                audiences.join(" or "),
            ),
        }
    }

    /// Whether `caller` has `needs` (429/503 when over budget or when the API server cannot
    /// say).
    pub async fn check(&self, caller: &Caller, needs: &Attributes) -> Result<Access, Refusal> {
        self.check_paid(caller, needs, &AtomicBool::new(false))
            .await
    }

    /// [`check`](Self::check), spending from the caller's budget only if `paid` is not yet set
    /// (and setting it): the checks of one request cost one review from its budget.
    async fn check_paid(
        &self,
        caller: &Caller,
        needs: &Attributes,
        paid: &AtomicBool,
    ) -> Result<Access, Refusal> {
        let call = self.call().await?;
        let review = api::review_of(&caller.user, needs);
        let admit = |_| {
            let spend = match paid.load(Ordering::Relaxed) {
                false => Spend::Caller(&caller.user.username),
                true => Spend::Paid,
            };
            let permit = self.admit("access", spend);
            if permit.is_ok() {
                paid.store(true, Ordering::Relaxed);
            }
            permit
        };
        let key = CacheKey::access(&caller.user, needs);
        let fetch = move || api::access_review(call, review);
        self.access.get_or_fetch(key, admit, fetch).await
    }

    /// The answers to every one of `needs`, in order, for one request: one review from the
    /// caller's budget however many are sent, [`FAN_OUT`] at a time.
    pub async fn check_all(
        &self,
        caller: &Caller,
        needs: &[Attributes],
    ) -> Vec<Result<Access, Refusal>> {
        let paid = AtomicBool::new(false);
        // Collected first: a lazy `map` closure inside this future makes it not `Send`-provable.
        let checks: Vec<_> = needs
            .iter()
            .map(|n| self.check_paid(caller, n, &paid))
            .collect();
        futures::stream::iter(checks)
            .buffered(FAN_OUT)
            .collect()
            .await
    }

    /// [`check`](Self::check), with a denial as 403 naming what is missing.
    pub async fn require(&self, caller: &Caller, needs: Attributes) -> Result<(), Refusal> {
        match self.check(caller, &needs).await? {
            Access::Allowed => Ok(()),
            Access::Denied(reason) => {
                tracing::info!(target: REFUSED_TARGET, user = ?caller.user.username, needs = ?needs, reason = ?reason, "status API access denied");
                Err(Refusal::Forbidden {
                    user: caller.user.username.clone(),
                    needs,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        status: StatusApiArgs,
    }

    #[test]
    fn the_default_settings_are_the_flags_defaults() {
        let flags = Flags::try_parse_from(["x"]).unwrap();
        assert_eq!(Settings::from_args(&flags.status), Settings::default());
    }
}
