//! PURE. Which parts of `serve` one process runs: admission and the watch loop together (small
//! clusters, `make run`), or either alone, so that the process answering admission never holds
//! the watch cache that grows with the cluster (docs/install.md, "Two parts").

/// The parts a `serve` process runs (`--role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Role {
    /// Admission and the watch loop with its status API, in one process.
    #[default]
    All,
    /// `/mutate` and `/validate-revision-delete` with the certificates, and a small projection
    /// of each Service for the revision guard; no watch cache, no status API.
    Admission,
    /// The watch loop, its writes, the status API and the drift report; no admission routes.
    Controller,
}

impl Role {
    /// Whether this process answers admission reviews.
    pub fn admits(self) -> bool {
        self != Role::Controller
    }

    /// Whether this process runs the watch loop and holds its cache.
    pub fn runs_loop(self) -> bool {
        self != Role::Admission
    }
}
