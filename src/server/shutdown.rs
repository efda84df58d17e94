//! Graceful shutdown: the trigger (SIGTERM, SIGINT or a test) and the phases that follow it.
//!
//! On trigger readiness fails at once; the listeners keep answering for the drain period
//! (kube-apiserver keeps reusing open keep-alive connections to a terminating pod), then stop
//! accepting and every in-flight request finishes. Owns signal handling, nothing else.

use tokio::sync::watch;

use super::readiness::Readiness;

/// Starts a shutdown; cheap to clone. Triggering twice is harmless.
#[derive(Debug, Clone)]
pub struct Shutdown {
    readiness: Readiness,
    tx: watch::Sender<bool>,
}

impl Shutdown {
    pub(crate) fn new(readiness: Readiness) -> Self {
        let (tx, _) = watch::channel(false);
        Self { readiness, tx }
    }

    /// Begin shutdown: `/readyz` fails from this call on, then the drain period starts.
    pub fn trigger(&self) {
        self.readiness.begin_shutdown();
        self.tx.send_replace(true);
    }

    /// Resolves once [`Shutdown::trigger`] has been called.
    pub async fn triggered(&self) {
        let mut rx = self.tx.subscribe();
        // An error means the sender is gone, which cannot happen while `self` lives.
        let _ = rx.wait_for(|&done| done).await;
    }
}

/// Resolves on the first SIGTERM or SIGINT.
pub async fn signal() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
