//! The leader's write queue: runs each app's [`Job`] off the loop, at most `limit` at a time and
//! never two at once for one app, and hands every job's outcome back to the loop.
//!
//! The loop stays the only owner of its state and never waits on a write: it [`Writes::dispatch`]es
//! and keeps computing and publishing status while jobs run; outcomes come back through
//! [`Writes::next_done`] (a `JoinSet`, the channel that also owns the tasks, so dropping the queue
//! aborts them when the loop stops). An app dirtied while its job runs is reconciled again once
//! the job ends, and a phase change seen meanwhile is held for that next job, so no Event is lost.
//! Decides nothing about what to write (the plan) or whether to (the job reads leadership).

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{Semaphore, watch};
use tokio::task::{Id, JoinSet};

use super::hub::AppKey;
use super::metrics::Metrics;
use super::writes::{Job, Transition, Writer};
use crate::cluster::call;

/// Why a job did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("a write failed")]
    Api(#[from] call::Error),
    #[error("the write task ended abnormally: {0}")]
    Task(String),
}

/// The outcome of one app's job, as the loop receives it.
#[derive(Debug)]
pub struct Done {
    pub key: AppKey,
    pub result: Result<(), Error>,
    /// The app was dirtied while the job ran: reconcile it again.
    pub again: bool,
}

struct Running {
    task: Id,
    again: bool,
}

/// The write queue (see the module docs).
pub struct Writes {
    writer: Writer,
    leader: watch::Receiver<bool>,
    permits: Arc<Semaphore>,
    tasks: JoinSet<(AppKey, call::Result<()>)>,
    running: BTreeMap<AppKey, Running>,
    held: BTreeMap<AppKey, Transition>,
    metrics: Metrics,
}

impl Writes {
    /// A queue running at most `limit` jobs at once (at least one).
    pub fn new(writer: Writer, leader: watch::Receiver<bool>, limit: usize) -> Self {
        let metrics = writer.metrics.clone();
        Self {
            writer,
            leader,
            permits: Arc::new(Semaphore::new(limit.max(1))),
            tasks: JoinSet::new(),
            running: BTreeMap::new(),
            held: BTreeMap::new(),
            metrics,
        }
    }

    /// The loop reconciled `key` and planned `job` (`None`: this replica does not write for it,
    /// not leading or the app gone). Starts the job at once (it waits for a write slot on its
    /// own), unless the app's previous job still runs: then the app is reconciled again when that
    /// one ends, and the job's Event is held for it.
    pub fn dispatch(&mut self, key: &AppKey, job: Option<Job>) {
        let transition = job.as_ref().and_then(|j| j.transition.clone());
        if let Some(running) = self.running.get_mut(key) {
            running.again = true;
            if let Some(later) = transition {
                let merged = match self.held.remove(key) {
                    Some(earlier) => earlier.then(later),
                    None => later,
                };
                self.held.insert(key.clone(), merged);
            }
            return;
        }
        let Some(mut job) = job else {
            self.held.remove(key);
            return;
        };
        if let Some(earlier) = self.held.remove(key) {
            job.transition = Some(match job.transition.take() {
                Some(later) => earlier.then(later),
                None => earlier,
            });
        }
        if job.transition.is_none() && job.actions.is_empty() {
            return;
        }
        let (writer, leader, permits) = (
            self.writer.clone(),
            self.leader.clone(),
            self.permits.clone(),
        );
        // The job logs where the loop does: the loop's subscriber travels with it.
        let job_task = async move {
            let key = job.key.clone();
            let Ok(_slot) = permits.acquire_owned().await else {
                // The queue owns the semaphore and never closes it; nothing to do if it did.
                return (key, Ok(()));
            };
            let started = std::time::Instant::now();
            let span = tracing::debug_span!("write", ns = %key.namespace, name = %key.name);
            let result = tracing::Instrument::instrument(writer.run(job, &leader), span).await;
            writer
                .metrics
                .write_duration
                .observe(started.elapsed().as_secs_f64());
            (key, result)
        };
        let task = self
            .tasks
            .spawn(tracing::instrument::WithSubscriber::with_current_subscriber(job_task));
        self.running.insert(
            key.clone(),
            Running {
                task: task.id(),
                again: false,
            },
        );
        self.metrics.writes_in_flight.inc();
    }

    /// Whether a job of this app is queued or running.
    pub fn is_running(&self, key: &AppKey) -> bool {
        self.running.contains_key(key)
    }

    /// The app was deleted: drop its held Event (a running job ends on its own; its writes
    /// carry preconditions).
    pub fn forget(&mut self, key: &AppKey) {
        self.held.remove(key);
    }

    /// The next finished job; pending while none runs. Cancel-safe (for `select!`).
    pub async fn next_done(&mut self) -> Done {
        loop {
            let Some(joined) = self.tasks.join_next_with_id().await else {
                return std::future::pending().await;
            };
            let (key, result) = match joined {
                Ok((_, (key, result))) => (key, result.map_err(Error::from)),
                Err(error) => {
                    let found = self.running.iter().find(|(_, r)| r.task == error.id());
                    let Some((key, _)) = found else { continue };
                    (key.clone(), Err(Error::Task(error.to_string())))
                }
            };
            let again = self.running.remove(&key).is_some_and(|r| r.again);
            self.metrics.writes_in_flight.dec();
            return Done { key, result, again };
        }
    }
}
