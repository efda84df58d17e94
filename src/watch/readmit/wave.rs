//! PURE: the re-admission wave — which drifted app to write again next, when, and what the
//! outcome of each write means — as a state machine the shell ([`super`]) drives.
//!
//! An app is started only when its drift has a reason re-admission acts on (never
//! `would-reject`, `excluded` or `blocked-revision-name`), it is not stopped, not being deleted,
//! not opted out, in a served namespace (`labelled`: one labelled for re-admission), not marked
//! unfixable or refused for what it is now, and fewer than `max_in_flight` re-admitted apps are unsettled and
//! `interval` has passed since the last start. An unsettled app that carries the re-admission
//! annotation is counted in flight even if another leader wrote it, so pacing survives a leader
//! change; one that failed here is not counted (nor failed) again until it changes.
//!
//! Failures are counted per namespace: `max_failures` failures in a row in one namespace (with no
//! app of it settling between) pause that namespace, and the wave goes on elsewhere, so one
//! tenant's broken images cannot stop the wave for everyone. The whole wave pauses when
//! `max_failures` failures in a row, with nothing settling anywhere between, come from at least
//! [`PAUSE_ALL_NAMESPACES`] namespaces. Both last until the policy changes.
//!
//! An API server that cannot be reached (a watch or a call of the wave's failed) holds the wave:
//! nothing starts, and the clocks of the apps in flight stop, since the cache can no longer show
//! them settle; they stay in flight. The wave asks for a sign of life ([`Step::Probe`]) once an
//! interval; once the API server answers, the clocks go on where they stopped and the next start
//! waits an interval. Time comes in as an argument (a duration since the shell started); nothing
//! here reads a clock.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::super::hub::AppKey;
use super::super::view::Stored;
use crate::admission::drift::{Drift, Reason};

/// Namespaces whose failures in a row pause the whole wave. Two tenants' broken images can fail
/// at the same time by chance; three unrelated namespaces failing with nothing settling between
/// them points at what they share: the policy, the sidecars, the platform.
pub const PAUSE_ALL_NAMESPACES: usize = 3;

/// Where re-admission acts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Never: the drift report only.
    #[default]
    Off,
    /// In namespaces labelled `ksvc-webhook.flyte.org/readmit=enabled`.
    Labelled,
    /// In every namespace the webhook serves.
    All,
}

/// How the wave is paced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub mode: Mode,
    /// The reasons acted on (each fixable).
    pub reasons: BTreeSet<Reason>,
    /// Re-admitted apps that may be unsettled at once (at least one).
    pub max_in_flight: usize,
    /// The least time between two starts.
    pub interval: Duration,
    /// How long a re-admitted app may take to settle before it counts as failed.
    pub ready_timeout: Duration,
    /// Failures in a row that pause a namespace (and the wave, across
    /// [`PAUSE_ALL_NAMESPACES`] namespaces).
    pub max_failures: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            mode: Mode::Off,
            reasons: Reason::ALL.into_iter().filter(|r| r.fixable()).collect(),
            max_in_flight: 1,
            interval: Duration::from_secs(30),
            ready_timeout: Duration::from_secs(300),
            max_failures: 3,
        }
    }
}

/// What the wave needs to know of one cached app.
#[derive(Debug, Clone)]
pub struct App<'a> {
    pub key: &'a AppKey,
    pub drift: &'a Drift,
    pub stored: &'a Stored,
    /// Labelled stopped: its start goes through admission anyway.
    pub stopped: bool,
    /// Being deleted.
    pub deleting: bool,
    /// Annotated `ksvc-webhook.flyte.org/readmit: "never"`.
    pub opted_out: bool,
    /// Its namespace is labelled `ksvc-webhook.flyte.org/readmit=enabled`.
    pub namespace_enabled: bool,
    /// Carries the re-admission annotation (this or another leader wrote it).
    pub readmitted: bool,
    /// `metadata.generation`: a settled app counts only once the cache shows the written one.
    pub generation: i64,
    /// Knative has observed its spec and its latest Revision is Ready.
    pub settled: bool,
    /// Knative has observed its spec and its latest Revision failed: why.
    pub failed: Option<String>,
}

/// What the shell does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Write this app again (a dry run first).
    Start(AppKey),
    /// A re-admitted app settled: its new Revision is Ready.
    Converged(AppKey),
    /// A re-admitted app failed: its Revision failed or was not Ready in time.
    Failed {
        key: AppKey,
        why: String,
        timed_out: bool,
    },
    /// The wave paused after this many failures in a row, across namespaces.
    Paused(u32),
    /// The wave stopped starting apps of one namespace after this many failures in a row there.
    NamespacePaused { namespace: String, failures: u32 },
    /// The API server could not be reached: ask it whether it answers again.
    Probe,
}

/// How a started write ended, as the shell reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// Written, as `generation`; `new_revision` when the template changed (then it must settle).
    Yes { new_revision: bool, generation: i64 },
    /// The dry run showed the write would not converge it.
    Unfixable,
    /// Admission or the API server refused the write (a failure).
    Refused,
    /// The API server could not be asked (no answer, throttling, a 502/503/504): nothing was
    /// written, nothing counts, and the wave holds until it answers again.
    Unreachable,
    /// Nothing was written and nothing counts: the KService changed or went since the wave
    /// looked at it (or the write ended abnormally); the wave looks again.
    Skipped,
}

/// The wave's state on this leader.
#[derive(Debug, Default)]
pub struct Wave {
    /// Unsettled re-admitted apps: since when, and the generation written.
    in_flight: BTreeMap<AppKey, (Duration, i64)>,
    /// Started, not yet reported.
    writing: BTreeSet<AppKey>,
    /// Apps a dry run showed unfixable, as they were then.
    unfixable: BTreeMap<AppKey, Stored>,
    /// Apps whose write was refused (a failure), as they were then: not tried again until
    /// they or the policy change, so one refused app cannot trip the breaker by itself.
    refused: BTreeMap<AppKey, Stored>,
    /// Apps that failed, with the generation that failed: not taken in flight again (and
    /// counted again) until they change.
    failed: BTreeMap<AppKey, i64>,
    /// Failures in a row, with nothing settled between, and the namespaces they came from.
    failures: u32,
    failing_namespaces: BTreeSet<String>,
    /// Failures in a row per namespace, with nothing of that namespace settled between.
    by_namespace: BTreeMap<String, u32>,
    /// Namespaces paused (and said so).
    paused_namespaces: BTreeSet<String>,
    paused: bool,
    /// The last start, or the API server's answer after an outage: the next start waits
    /// `interval` after it.
    paced_from: Option<Duration>,
    /// Since when the API server could not be reached, while it cannot.
    down_since: Option<Duration>,
    /// When the last probe started, and whether it is still under way.
    probed_at: Option<Duration>,
    probing: bool,
}

impl Wave {
    /// The next steps at `now`, given every cached app.
    pub fn step<'a>(
        &mut self,
        settings: &Settings,
        apps: impl IntoIterator<Item = App<'a>>,
        now: Duration,
    ) -> Vec<Step> {
        let mut steps = Vec::new();
        let mut candidate = None;
        let mut seen = BTreeSet::new();
        for app in apps {
            seen.insert(app.key.clone());
            if self.in_flight.contains_key(app.key) {
                steps.extend(self.settle(settings, &app, now));
            } else if app.readmitted
                && !app.settled
                && app.failed.is_none()
                && self.failed.get(app.key) != Some(&app.generation)
            {
                // Written by another leader, or before a restart: it counts against the pace.
                self.in_flight
                    .insert(app.key.clone(), (now, app.generation));
            } else if candidate.is_none() && self.eligible(settings, &app) {
                candidate = Some(app.key.clone());
            }
        }
        self.in_flight.retain(|k, _| seen.contains(k));
        self.unfixable.retain(|k, _| seen.contains(k));
        self.refused.retain(|k, _| seen.contains(k));
        self.failed.retain(|k, _| seen.contains(k));
        let max = settings.max_failures.max(1);
        for (namespace, &failures) in &self.by_namespace {
            if failures >= max && self.paused_namespaces.insert(namespace.clone()) {
                let namespace = namespace.clone();
                steps.push(Step::NamespacePaused {
                    namespace,
                    failures,
                });
            }
        }
        let spread = self.failing_namespaces.len() >= PAUSE_ALL_NAMESPACES;
        if self.failures >= max && spread && !self.paused {
            self.paused = true;
            steps.push(Step::Paused(self.failures));
        }
        let interval_since =
            |at: Option<Duration>| at.is_none_or(|at| now.saturating_sub(at) >= settings.interval);
        if self.down_since.is_some() {
            if !self.probing && interval_since(self.probed_at) {
                self.probing = true;
                self.probed_at = Some(now);
                steps.push(Step::Probe);
            }
            return steps;
        }
        let room = self.in_flight.len() + self.writing.len() < settings.max_in_flight.max(1);
        let due = interval_since(self.paced_from);
        if let Some(key) = candidate.filter(|_| !self.paused && room && due) {
            self.paced_from = Some(now);
            self.writing.insert(key.clone());
            steps.push(Step::Start(key));
        }
        steps
    }

    fn eligible(&self, settings: &Settings, app: &App) -> bool {
        let acted_on = app.drift.reasons().any(|r| settings.reasons.contains(&r));
        let left_alone = app.drift.reasons().any(|r| !r.fixable());
        let served = match settings.mode {
            Mode::Off => false,
            Mode::Labelled => app.namespace_enabled,
            Mode::All => true,
        };
        acted_on
            && !left_alone
            && served
            && !app.stopped
            && !app.deleting
            && !app.opted_out
            && !self.writing.contains(app.key)
            && self
                .by_namespace
                .get(&*app.key.namespace)
                .is_none_or(|n| *n < settings.max_failures.max(1))
            && self.unfixable.get(app.key) != Some(app.stored)
            && self.refused.get(app.key) != Some(app.stored)
    }

    /// An in-flight app: settled, failed, timed out, or still waiting.
    fn settle(&mut self, settings: &Settings, app: &App, now: Duration) -> Option<Step> {
        let (since, written) = *self.in_flight.get(app.key)?;
        let key = app.key.clone();
        // Until the cache shows the write, what it says of the app is older than the write.
        let seen = app.generation >= written;
        let failed = match (&app.failed, app.settled && seen) {
            (_, true) => {
                self.in_flight.remove(app.key);
                self.failures = 0;
                self.failing_namespaces.clear();
                self.by_namespace.remove(&*app.key.namespace);
                return Some(Step::Converged(key));
            }
            (Some(why), false) if seen => Some((why.clone(), false)),
            // While the API server cannot be reached, the cache cannot show it settle.
            (_, false)
                if self.down_since.is_none()
                    && now.saturating_sub(since) > settings.ready_timeout =>
            {
                Some((
                    format!(
                        "its new Revision was not Ready within {}s",
                        settings.ready_timeout.as_secs()
                    ),
                    true,
                ))
            }
            (_, false) => None,
        };
        let (why, timed_out) = failed?;
        self.in_flight.remove(app.key);
        self.failed.insert(key.clone(), app.generation.max(written));
        self.failure(&key.namespace);
        Some(Step::Failed {
            key,
            why,
            timed_out,
        })
    }

    /// How a started write ended; `stored` is the app as the write found it.
    pub fn written(&mut self, key: &AppKey, stored: Stored, written: &Written, now: Duration) {
        self.writing.remove(key);
        // What an earlier write of the app left is superseded by this one's outcome.
        self.unfixable.remove(key);
        self.refused.remove(key);
        match written {
            Written::Yes {
                new_revision: true,
                generation,
            } => {
                self.in_flight.insert(key.clone(), (now, *generation));
            }
            Written::Yes {
                new_revision: false,
                ..
            }
            | Written::Skipped => {}
            Written::Unreachable => {
                self.unreachable(now);
            }
            Written::Unfixable => {
                self.unfixable.insert(key.clone(), stored);
            }
            Written::Refused => {
                self.failure(&key.namespace);
                self.refused.insert(key.clone(), stored);
            }
        }
    }

    /// Count a failure of an app of `namespace`.
    fn failure(&mut self, namespace: &str) {
        self.failures += 1;
        self.failing_namespaces.insert(namespace.to_owned());
        *self.by_namespace.entry(namespace.to_owned()).or_default() += 1;
    }

    /// The API server could not be reached at `now`: hold the wave until it answers. Returns
    /// whether this begins an outage.
    pub fn unreachable(&mut self, now: Duration) -> bool {
        let begins = self.down_since.is_none();
        self.down_since.get_or_insert(now);
        begins
    }

    /// A probe ended at `now`: the API server `answered`, or not. Returns whether this ends an
    /// outage: then the clocks of the apps in flight go on where they stopped, and the next
    /// start waits an interval.
    pub fn probed(&mut self, answered: bool, now: Duration) -> bool {
        self.probing = false;
        let Some(since) = self.down_since.filter(|_| answered) else {
            return false;
        };
        // What each app's clock had counted when the outage began; one taken in flight
        // during it had counted nothing.
        for (started, _) in self.in_flight.values_mut() {
            let counted = since.saturating_sub(*started);
            *started = now.saturating_sub(counted);
        }
        self.down_since = None;
        self.paced_from = Some(now);
        true
    }

    /// Whether the wave holds because the API server cannot be reached.
    pub fn unreachable_now(&self) -> bool {
        self.down_since.is_some()
    }

    /// The policy changed: a paused wave resumes, and every app may be tried again.
    pub fn policy_changed(&mut self) {
        self.paused = false;
        self.failures = 0;
        self.failing_namespaces.clear();
        self.by_namespace.clear();
        self.paused_namespaces.clear();
        self.unfixable.clear();
        self.refused.clear();
    }

    /// This replica stopped leading: forget what it was doing (the next leader starts from
    /// what the cluster says), and the probe under way with it. An outage outlasts it.
    pub fn reset(&mut self) {
        *self = Self {
            paused: self.paused,
            failures: self.failures,
            failing_namespaces: std::mem::take(&mut self.failing_namespaces),
            by_namespace: std::mem::take(&mut self.by_namespace),
            paused_namespaces: std::mem::take(&mut self.paused_namespaces),
            down_since: self.down_since,
            ..Self::default()
        };
    }

    /// Unsettled re-admitted apps and writes under way.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len() + self.writing.len()
    }

    /// Whether the wave is paused.
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// What the wave is doing with one app, for `/apps`.
    pub fn state_of(&self, key: &AppKey) -> Option<&'static str> {
        match () {
            () if self.writing.contains(key) => Some("writing"),
            () if self.in_flight.contains_key(key) => Some("waiting-for-ready"),
            () if self.unfixable.contains_key(key) => Some("unfixable"),
            () if self.refused.contains_key(key) => Some("refused"),
            () => None,
        }
    }
}

#[cfg(test)]
#[path = "wave_tests.rs"]
mod tests;
