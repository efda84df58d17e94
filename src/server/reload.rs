//! The one file-reload loop of the server, for the serving certificate (`tls.rs`) and the
//! sidecar catalogue (`catalogue.rs`): tick, re-read, compare with the content last seen, and
//! swap in what changed and loads.
//!
//! Kubernetes updates a mounted Secret or ConfigMap by swapping a `..data` symlink, so inotify on
//! the files is not reliable; the files are small, so they are read again on every tick (through
//! the link) and compared by content. Owns no file: each [`Reload`] reads and parses its own, and
//! logs what came of a tick.

use std::future::Future;
use std::time::Duration;

use tokio::time::MissedTickBehavior;

/// Something a reload loop keeps current from files.
pub trait Reload: Sized + Send {
    /// One tick: read the files, and if their content changed, swap in what they hold when it
    /// loads; log the outcome (a rejected change keeps what is serving).
    fn reload(&mut self) -> impl Future<Output = ()> + Send;

    /// Reload every `interval` until the task is dropped; the first tick is skipped, as the
    /// files were just loaded.
    fn run(mut self, interval: Duration) -> impl Future<Output = ()> + Send {
        async move {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                self.reload().await;
            }
        }
    }
}

/// The content a reload last read, to tell a change.
#[derive(Debug)]
pub struct LastSeen<T>(T);

impl<T: PartialEq> LastSeen<T> {
    /// `first` as the content seen.
    pub fn new(first: T) -> Self {
        Self(first)
    }

    /// `content` when it differs from the content last seen, else `None`. It is remembered
    /// whatever the caller then makes of it: a broken file is reported once, not on every tick,
    /// and a later fix is noticed as a change.
    pub fn changed(&mut self, content: T) -> Option<&T> {
        if content == self.0 {
            return None;
        }
        self.0 = content;
        Some(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_is_new_once() {
        let mut seen = LastSeen::new("a");
        assert_eq!(seen.changed("a"), None);
        assert_eq!(seen.changed("b"), Some(&"b"));
        assert_eq!(seen.changed("b"), None, "reported once");
        assert_eq!(seen.changed("a"), Some(&"a"), "a change back is a change");
    }
}
