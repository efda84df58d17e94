//! PURE: the re-admission wave — which drifted app to write again next, when, and what the
//! outcome of each write means — as a state machine the shell ([`super`]) drives.
//!
//! An app is started only when its drift has a reason re-admission acts on (never
//! `would-reject`, `excluded` or `blocked-revision-name`), it is not stopped, not being deleted,
//! not opted out, in a served namespace (`labelled`: one labelled for re-admission), not marked
//! unfixable for what it is now, and fewer than `max_in_flight` re-admitted apps are unsettled and
//! `interval` has passed since the last start. An unsettled app that carries the re-admission
//! annotation is counted in flight even if another leader wrote it, so pacing survives a leader
//! change. `max_failures` failures in a row pause the wave until the policy changes. Time comes
//! in as an argument (a duration since the shell started); nothing here reads a clock.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::super::hub::AppKey;
use super::super::view::Stored;
use crate::admission::drift::{Drift, Reason};

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
    /// Failures in a row that pause the wave.
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
    /// The wave paused after this many failures in a row.
    Paused(u32),
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
    /// The API server could not be asked: nothing was written, nothing counts.
    Unreachable,
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
    failures: u32,
    paused: bool,
    last_start: Option<Duration>,
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
            } else if app.readmitted && !app.settled && app.failed.is_none() {
                // Written by another leader, or before a restart: it counts against the pace.
                self.in_flight
                    .insert(app.key.clone(), (now, app.generation));
            } else if candidate.is_none() && self.eligible(settings, &app) {
                candidate = Some(app.key.clone());
            }
        }
        self.in_flight.retain(|k, _| seen.contains(k));
        self.unfixable.retain(|k, _| seen.contains(k));
        if self.failures >= settings.max_failures.max(1) && !self.paused {
            self.paused = true;
            steps.push(Step::Paused(self.failures));
        }
        let room = self.in_flight.len() + self.writing.len() < settings.max_in_flight.max(1);
        let due = self
            .last_start
            .is_none_or(|at| now.saturating_sub(at) >= settings.interval);
        if let Some(key) = candidate.filter(|_| !self.paused && room && due) {
            self.last_start = Some(now);
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
            && self.unfixable.get(app.key) != Some(app.stored)
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
                return Some(Step::Converged(key));
            }
            (Some(why), false) if seen => Some((why.clone(), false)),
            (_, false) if now.saturating_sub(since) > settings.ready_timeout => Some((
                format!(
                    "its new Revision was not Ready within {}s",
                    settings.ready_timeout.as_secs()
                ),
                true,
            )),
            (_, false) => None,
        };
        let (why, timed_out) = failed?;
        self.in_flight.remove(app.key);
        self.failures += 1;
        Some(Step::Failed {
            key,
            why,
            timed_out,
        })
    }

    /// How a started write ended; `stored` is the app as the write found it.
    pub fn written(&mut self, key: &AppKey, stored: Stored, written: &Written, now: Duration) {
        self.writing.remove(key);
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
            | Written::Unreachable => {}
            Written::Unfixable => {
                self.unfixable.insert(key.clone(), stored);
            }
            Written::Refused => self.failures += 1,
        }
    }

    /// The policy changed: a paused wave resumes, and every app may be tried again.
    pub fn policy_changed(&mut self) {
        self.paused = false;
        self.failures = 0;
        self.unfixable.clear();
    }

    /// This replica stopped leading: forget what it was doing (the next leader starts from
    /// what the cluster says).
    pub fn reset(&mut self) {
        *self = Self {
            paused: self.paused,
            failures: self.failures,
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
            () => None,
        }
    }
}

#[cfg(test)]
#[path = "wave_tests.rs"]
mod tests;
