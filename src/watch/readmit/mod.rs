//! Re-admission: on the leader only, and only when asked (`--readmit`), write drifted KServices
//! again through kube-apiserver's whole admission chain, at the pace the flags set, stopping at
//! the first signs of trouble.
//!
//! The write is an annotation bump (`ksvc-webhook.flyte.org/readmitted`), so Knative's defaulting
//! and every webhook run as for any write, and nothing is edited around admission. Before it, a
//! server-side dry run must show that the stored result no longer drifts for a reason
//! re-admission acts on; otherwise nothing is written and the app is unfixable until it or the
//! policy changes, so nothing loops. [`wave`] decides what to start and what an outcome means;
//! this shell reads the cache, runs each write off the loop (the loop never waits on one),
//! records Events (`Readmitted`, `ReadmitFailed`) and the `ksvc_webhook_readmit_*` metrics. An
//! API server that cannot be reached (told by the loop's watches and the wave's own calls) holds
//! the wave until a probe finds it answering again.

pub mod args;
pub mod wave;
mod write;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::task::{Id, JoinSet};
use tokio::time::{Instant, Interval};

use super::cache::{Cache, service_key};
use super::drift::DriftIndex;
use super::hub::AppKey;
use super::view::{KService, Stored, condition};
use super::writes::Writer;
use crate::admission::Policy;
use crate::admission::drift::Drift;
use crate::keys;
use wave::{App, Settings, Step, Wave, Written};

/// How one started re-admission ended.
#[derive(Debug)]
pub struct Outcome {
    pub(super) key: AppKey,
    /// The app as the write found it.
    pub(super) found: Stored,
    pub(super) written: Written,
    /// Why it was refused, unfixable or not written.
    pub(super) detail: String,
}

/// What a task of the shell ended with.
enum Ended {
    /// A write, with its app.
    Write(Outcome),
    /// A probe: whether the API server answered.
    Probe(Result<(), String>),
    /// An Event was recorded (or not: best effort).
    Event,
}

/// What woke the re-admission branch of the loop.
pub enum Wake {
    /// Time to look at the wave again.
    Tick,
    /// A write ended.
    Done(Outcome),
}

/// The re-admission of drifted KServices (see the module docs).
pub struct Readmitter {
    settings: Settings,
    wave: Wave,
    writer: Writer,
    policy: Arc<ArcSwap<Policy>>,
    epoch: Instant,
    tick: Interval,
    /// Writes, probes and Events under way.
    tasks: JoinSet<Ended>,
    writing: BTreeMap<Id, AppKey>,
    /// The reasons each started app was written for, for its `Readmitted` Event.
    reasons: BTreeMap<AppKey, String>,
    /// Namespaces labelled `ksvc-webhook.flyte.org/readmit=enabled`.
    enabled: BTreeSet<String>,
}

impl Readmitter {
    /// Re-admission with `settings`, writing with `writer`, judging dry runs under `policy`.
    pub fn new(settings: Settings, writer: Writer, policy: Arc<ArcSwap<Policy>>) -> Self {
        let period =
            (settings.interval / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self {
            settings,
            wave: Wave::default(),
            writer,
            policy,
            epoch: Instant::now(),
            tick,
            tasks: JoinSet::new(),
            writing: BTreeMap::new(),
            reasons: BTreeMap::new(),
            enabled: BTreeSet::new(),
        }
    }

    /// Whether re-admission is on (`--readmit` other than `off`).
    pub fn active(&self) -> bool {
        self.settings.mode != wave::Mode::Off
    }

    /// The next tick, or the next write that ended.
    pub async fn next(&mut self) -> Wake {
        loop {
            tokio::select! {
                _ = self.tick.tick() => return Wake::Tick,
                Some(joined) = self.tasks.join_next_with_id() => match joined {
                    Ok((_, Ended::Write(outcome))) => {
                        self.writing.retain(|_, key| *key != outcome.key);
                        return Wake::Done(outcome);
                    }
                    Ok((_, Ended::Probe(answer))) => {
                        self.probed(answer);
                        return Wake::Tick;
                    }
                    Ok((_, Ended::Event)) => {}
                    // Aborted (leadership lost) or panicked: nothing is known to be written.
                    Err(error) => if let Some(key) = self.writing.remove(&error.id()) {
                        return Wake::Done(Outcome {
                            key,
                            found: Stored::default(),
                            written: Written::Skipped,
                            detail: error.to_string(),
                        });
                    },
                },
            }
        }
    }

    /// A watch could not reach the API server: hold the wave until it answers (said once, by
    /// the leader).
    pub fn unreachable(&mut self, why: &str, leading: bool) {
        if self.active() && self.wave.unreachable(self.epoch.elapsed()) && leading {
            self.outage_began(why);
        }
    }

    fn outage_began(&self, why: &str) {
        tracing::warn!(
            why,
            in_flight = self.wave.in_flight(),
            "the API server cannot be reached; re-admission starts nothing, and waits for what is in flight, until it answers"
        );
    }

    fn probed(&mut self, answer: Result<(), String>) {
        let answered = answer.is_ok();
        if self.wave.probed(answered, self.epoch.elapsed()) {
            tracing::info!(
                in_flight = self.wave.in_flight(),
                interval = ?self.settings.interval,
                "the API server answers again; re-admission resumes after the interval"
            );
        } else if let Err(why) = answer {
            tracing::warn!(why, retry_in = ?self.settings.interval, "the API server still cannot be reached; re-admission asks again");
        }
    }

    /// Record whether a namespace is labelled for `--readmit=labelled`.
    pub fn set_namespace(&mut self, name: &str, enabled: bool) {
        match enabled {
            true => self.enabled.insert(name.to_owned()),
            false => self.enabled.remove(name),
        };
    }

    /// Look at every cached app and start, settle or fail what the wave says; returns the apps
    /// whose `/apps` record changes. Only the leader acts.
    pub fn step(&mut self, cache: &Cache, drift: &DriftIndex, leading: bool) -> Vec<AppKey> {
        if !leading {
            return Vec::new();
        }
        let services = cache.services.state();
        let keyed: Vec<(AppKey, &KService)> = services
            .iter()
            .map(|k| (service_key(k), k.as_ref()))
            .collect();
        let enabled = &self.enabled;
        let apps = keyed.iter().filter_map(|(key, ksvc)| {
            let drift = drift.get(key)?;
            Some(view(key, ksvc, drift, enabled.contains(&*key.namespace)))
        });
        let steps = self.wave.step(&self.settings, apps, self.epoch.elapsed());
        let mut changed = Vec::new();
        for step in steps {
            let key = match &step {
                Step::Start(key) | Step::Converged(key) | Step::Failed { key, .. } => key.clone(),
                Step::Probe => {
                    let writer = self.writer.clone();
                    self.tasks
                        .spawn(async move { Ended::Probe(write::probe(&writer).await) });
                    continue;
                }
                Step::Paused(failures) => {
                    tracing::warn!(
                        failures,
                        "re-admission paused after failures in a row across namespaces; it resumes when the policy changes or the server restarts"
                    );
                    continue;
                }
                Step::NamespacePaused {
                    namespace,
                    failures,
                } => {
                    tracing::warn!(
                        namespace = ?namespace,
                        failures,
                        "re-admission paused in one namespace after failures in a row there; it goes on in the others, and resumes there when the policy changes or the server restarts"
                    );
                    continue;
                }
            };
            let Some(ksvc) = cache.service(&key) else {
                continue;
            };
            let found = drift.get(&key).cloned().unwrap_or_default();
            self.act(step, ksvc, found);
            changed.push(key);
        }
        self.refresh_metrics();
        changed
    }

    fn act(&mut self, step: Step, ksvc: Arc<KService>, found: Drift) {
        let metrics = &self.writer.metrics;
        match step {
            Step::Start(key) => {
                let reasons: Vec<&str> = found.reasons().map(|r| r.as_str()).collect();
                tracing::info!(ns = &*key.namespace, name = &*key.name, reasons = ?reasons, "re-admitting");
                self.reasons.insert(key.clone(), reasons.join(", "));
                let write = write::readmit(
                    self.writer.clone(),
                    key.clone(),
                    ksvc,
                    self.policy.load_full(),
                    found.new_revision,
                );
                let handle = self.tasks.spawn(async move { Ended::Write(write.await) });
                self.writing.insert(handle.id(), key);
            }
            Step::Converged(key) => {
                metrics.readmit("converged");
                let revision = ksvc.status.latest_ready_revision_name.to_string();
                let note = format!(
                    "written again through admission for {}; revision {revision} is Ready",
                    self.reasons.remove(&key).unwrap_or_default(),
                );
                self.event(ksvc, false, "Readmitted", note, Some(revision));
            }
            Step::Failed {
                key,
                why,
                timed_out,
            } => {
                metrics.readmit(if timed_out { "timed_out" } else { "failed" });
                self.reasons.remove(&key);
                tracing::warn!(ns = &*key.namespace, name = &*key.name, why = ?why, "re-admitted app failed");
                let note = format!("written again, but {why}");
                self.event(ksvc, true, "ReadmitFailed", note, None);
            }
            Step::Paused(_) | Step::NamespacePaused { .. } | Step::Probe => {}
        }
    }

    /// A write ended: tell the wave, count it, record an Event where one is due.
    pub fn on_outcome(&mut self, outcome: Outcome, cache: &Cache) -> Vec<AppKey> {
        let Outcome {
            key,
            found,
            written,
            detail,
        } = outcome;
        let reachable = !self.wave.unreachable_now();
        self.wave
            .written(&key, found, &written, self.epoch.elapsed());
        if reachable && self.wave.unreachable_now() {
            self.outage_began(&detail);
        }
        let ksvc = cache.service(&key);
        let (result, note) = match &written {
            Written::Yes {
                new_revision: true, ..
            } => (None, None),
            Written::Yes {
                new_revision: false,
                ..
            } => {
                let reasons = self.reasons.remove(&key).unwrap_or_default();
                let note =
                    format!("written again through admission for {reasons}; no new Revision");
                (Some("converged"), Some((false, "Readmitted", note)))
            }
            Written::Unfixable => {
                self.reasons.remove(&key);
                let note = format!(
                    "not written: a server dry run shows the write would leave {detail}; not tried again until the app or the policy changes"
                );
                (Some("unfixable"), Some((true, "ReadmitFailed", note)))
            }
            Written::Refused => {
                self.reasons.remove(&key);
                let note = format!("the write was refused: {detail}");
                (Some("refused"), Some((true, "ReadmitFailed", note)))
            }
            Written::Unreachable => (None, None),
            Written::Skipped => {
                tracing::info!(ns = &*key.namespace, name = &*key.name, why = %detail, "re-admission wrote nothing; the wave looks again after the interval");
                (None, None)
            }
        };
        if let Some(result) = result {
            self.writer.metrics.readmit(result);
        }
        if let (Some((warning, reason, note)), Some(ksvc)) = (note, ksvc) {
            self.event(ksvc, warning, reason, note, None);
        }
        self.refresh_metrics();
        vec![key]
    }

    fn event(
        &mut self,
        ksvc: Arc<KService>,
        warning: bool,
        reason: &'static str,
        note: String,
        revision: Option<String>,
    ) {
        let writer = self.writer.clone();
        self.tasks.spawn(async move {
            let revision = revision.as_deref().filter(|name| !name.is_empty());
            writer
                .event(&ksvc, warning, reason, "Readmit", note, revision)
                .await;
            Ended::Event
        });
    }

    fn refresh_metrics(&self) {
        let metrics = &self.writer.metrics;
        metrics.readmit_in_flight.set(self.wave.in_flight() as i64);
        metrics.readmit_paused.set(i64::from(self.wave.paused()));
    }

    /// The policy changed: a paused wave resumes, unfixable apps may be tried again.
    pub fn policy_changed(&mut self) {
        self.wave.policy_changed();
        self.refresh_metrics();
    }

    /// This replica stopped leading: abort the writes under way and forget the wave.
    pub fn reset(&mut self) {
        self.tasks.abort_all();
        self.writing.clear();
        self.reasons.clear();
        self.wave.reset();
        self.refresh_metrics();
    }

    /// What re-admission is doing with one app, for `/apps`.
    pub fn state_of(&self, key: &AppKey) -> Option<&'static str> {
        self.wave.state_of(key)
    }
}

/// What the wave reads of one cached app.
fn view<'a>(key: &'a AppKey, ksvc: &'a KService, drift: &'a Drift, enabled: bool) -> App<'a> {
    let status = &ksvc.status;
    let observed = ksvc.generation_observed();
    let latest = &status.latest_created_revision_name;
    let settled = observed && *latest == status.latest_ready_revision_name;
    let ready = condition(&status.conditions, "Ready");
    let failed = ready
        .filter(|c| observed && !settled && &*c.status == "False")
        .map(|c| format!("{}: {}", c.reason, c.message));
    App {
        key,
        drift,
        stored: &ksvc.stored,
        stopped: ksvc.is_stopped(),
        deleting: ksvc.deleting,
        opted_out: ksvc.annotation(keys::ANNOTATION_READMIT) == Some(keys::READMIT_NEVER),
        namespace_enabled: enabled,
        readmitted: ksvc.annotation(keys::ANNOTATION_READMITTED).is_some(),
        generation: ksvc.generation.unwrap_or(0),
        settled,
        failed,
    }
}
