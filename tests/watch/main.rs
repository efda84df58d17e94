//! The watch loop of `src/watch/` against the fake API server: the controller, its write
//! queue, the drift report and re-admission.
//!
//! One test binary for the folder; each module tests one part of it.

#[cfg(test)]
mod controller;
#[cfg(test)]
mod drift;
#[cfg(test)]
mod readmit;
#[cfg(test)]
mod readmit_faults;
#[cfg(test)]
mod write_queue;
