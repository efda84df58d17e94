//! Graceful shutdown: the trigger (SIGTERM, SIGINT or a test) and the phases that follow it.
//! SIGINT (a Ctrl-C at a terminal) skips the drain, and the log says so.
//!
//! On trigger readiness fails at once; the listeners keep answering for the drain period
//! (kube-apiserver keeps reusing open keep-alive connections to a terminating pod). Then the
//! server stops: the listeners close, long-lived answers (`/apps/watch`) end with a last event,
//! and the requests in flight get at most `--shutdown-timeout` before the remaining connections
//! are dropped. Owns signal handling and the phase, nothing else.

use tokio::sync::watch;

use super::readiness::Readiness;

/// Where the server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Running,
    /// Readiness fails; requests are still answered.
    Draining,
    /// No new connections; the ones open finish, within the bound.
    Stopping,
}

/// Starts a shutdown; cheap to clone. Triggering twice is harmless.
#[derive(Debug, Clone)]
pub struct Shutdown {
    readiness: Readiness,
    tx: watch::Sender<Phase>,
}

impl Shutdown {
    pub(crate) fn new(readiness: Readiness) -> Self {
        let (tx, _) = watch::channel(Phase::Running);
        Self { readiness, tx }
    }

    /// Begin shutdown: `/readyz` fails from this call on, then the drain period starts.
    pub fn trigger(&self) {
        self.readiness.begin_shutdown();
        self.advance(Phase::Draining);
    }

    /// Stop at once, with no drain (a Ctrl-C at a terminal): `/readyz` fails and the server stops
    /// accepting, in one step, so nothing can see a drain that is not there.
    pub fn interrupt(&self) {
        self.readiness.begin_shutdown();
        self.advance(Phase::Stopping);
    }

    /// Whether the shutdown skips the drain: [`Shutdown::interrupt`] was called before any drain
    /// ended. Read it once [`Shutdown::triggered`] has resolved.
    pub fn skips_drain(&self) -> bool {
        *self.tx.borrow() == Phase::Stopping
    }

    /// Resolves once [`Shutdown::trigger`] or [`Shutdown::interrupt`] has been called.
    pub async fn triggered(&self) {
        let mut rx = self.tx.subscribe();
        // An error means the sender is gone, which cannot happen while `self` lives.
        let _ = rx.wait_for(|&now| now >= Phase::Draining).await;
    }

    /// Stop accepting and end long-lived answers now: after the drain, or at once when the drain
    /// is skipped (a Ctrl-C at a terminal).
    pub fn stop(&self) {
        self.readiness.begin_shutdown();
        self.advance(Phase::Stopping);
    }

    /// A handle that resolves once the server stops accepting (the drain is over).
    pub fn stopping(&self) -> Stopping {
        Stopping(self.tx.subscribe())
    }

    fn advance(&self, to: Phase) {
        self.tx.send_if_modified(|phase| {
            let later = to > *phase;
            if later {
                *phase = to;
            }
            later
        });
    }
}

/// Resolves once the server stops accepting; cheap to clone. Long-lived answers select on it.
#[derive(Debug, Clone)]
pub struct Stopping(watch::Receiver<Phase>);

impl Stopping {
    /// Wait until the server stops accepting (at once if it has). A server dropped without
    /// stopping counts as stopped.
    pub async fn wait(&mut self) {
        let _ = self.0.wait_for(|&now| now == Phase::Stopping).await;
    }
}

/// Which signal asked the server to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM, as the kubelet sends it: drain first, kube-apiserver still holds connections.
    Terminate,
    /// SIGINT, a Ctrl-C at a terminal: nobody to drain for, stop at once.
    Interrupt,
}

/// Resolves on the first SIGTERM or SIGINT, saying which.
pub async fn signal() -> std::io::Result<Signal> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let received = tokio::select! {
        _ = term.recv() => Signal::Terminate,
        _ = int.recv() => Signal::Interrupt,
    };
    tracing::info!(signal = ?received, "signal received");
    Ok(received)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_interrupt_stops_at_once_and_says_it_skips_the_drain() {
        let readiness = Readiness::default();
        let shutdown = Shutdown::new(readiness.clone());
        shutdown.interrupt();
        shutdown.triggered().await;
        assert!(readiness.is_shutting_down());
        assert!(shutdown.skips_drain());
        shutdown.stopping().wait().await;

        let draining = Shutdown::new(Readiness::default());
        draining.trigger();
        draining.triggered().await;
        assert!(!draining.skips_drain(), "SIGTERM drains");
    }

    #[tokio::test]
    async fn trigger_fails_readiness_and_wakes_waiters() {
        let readiness = Readiness::default();
        let shutdown = Shutdown::new(readiness.clone());
        let waiter = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { shutdown.triggered().await }
        });
        assert!(!readiness.is_shutting_down());
        shutdown.trigger();
        assert!(readiness.is_shutting_down());
        waiter.await.unwrap();
        shutdown.triggered().await;
    }

    #[tokio::test]
    async fn stopping_follows_the_drain_and_never_goes_back() {
        let shutdown = Shutdown::new(Readiness::default());
        let mut stopping = shutdown.stopping();
        let waiter = tokio::spawn(async move { stopping.wait().await });
        shutdown.trigger();
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        shutdown.stop();
        waiter.await.unwrap();
        // A late trigger does not move the phase back.
        shutdown.trigger();
        shutdown.stopping().wait().await;
    }
}
