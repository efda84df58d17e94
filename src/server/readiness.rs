//! Readiness: named gates that must all be open, and the shutdown flag that closes them all.
//!
//! Readiness is admission's: it says whether this replica can answer AdmissionReviews, so only
//! what admission needs may gate it. The server holds the `certificates` gate itself; a
//! component admission cannot work without asks for a gate with [`Readiness::gate`] and stores
//! `true` into it when ready. The watch loop never gates it (its sync gates `/apps` and its own
//! metric): with `failurePolicy: Fail`, a replica held unready by a loop that cannot list would
//! make kube-apiserver refuse every KService write. Once shutdown begins `/readyz` fails for good.
//! Owns no I/O.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::locks::lock;

/// Shared readiness state; clones share the same gates.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    gates: Mutex<Vec<(String, Arc<AtomicBool>)>>,
    shutting_down: AtomicBool,
}

/// What `/readyz` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Ready,
    ShuttingDown,
    /// The names of the gates still closed, in registration order.
    Waiting(Vec<String>),
}

impl Readiness {
    /// Register a gate named `name`, closed (`false`) until its owner stores `true`.
    /// Asking twice for the same name returns the same gate.
    pub fn gate(&self, name: &str) -> Arc<AtomicBool> {
        let mut gates = lock(&self.inner.gates);
        if let Some((_, gate)) = gates.iter().find(|(n, _)| n == name) {
            return gate.clone();
        }
        let gate = Arc::new(AtomicBool::new(false));
        gates.push((name.to_string(), gate.clone()));
        gate
    }

    /// Fail readiness from now on (shutdown has begun).
    pub fn begin_shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::SeqCst);
    }

    /// Whether shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutting_down.load(Ordering::SeqCst)
    }

    /// The current status.
    pub fn status(&self) -> Status {
        if self.is_shutting_down() {
            return Status::ShuttingDown;
        }
        let gates = lock(&self.inner.gates);
        let closed: Vec<String> = gates
            .iter()
            .filter(|(_, gate)| !gate.load(Ordering::SeqCst))
            .map(|(name, _)| name.clone())
            .collect();
        match closed.is_empty() {
            true => Status::Ready,
            false => Status::Waiting(closed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_then_shutdown() {
        let readiness = Readiness::default();
        assert_eq!(readiness.status(), Status::Ready);
        let cache = readiness.gate("cache");
        let certs = readiness.gate("certificates");
        assert_eq!(
            readiness.status(),
            Status::Waiting(vec!["cache".into(), "certificates".into()])
        );
        certs.store(true, Ordering::SeqCst);
        assert!(Arc::ptr_eq(&cache, &readiness.gate("cache")));
        cache.store(true, Ordering::SeqCst);
        assert_eq!(readiness.status(), Status::Ready);
        readiness.clone().begin_shutdown();
        assert_eq!(readiness.status(), Status::ShuttingDown);
    }
}
