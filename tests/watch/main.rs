//! The watch loop of `src/watch/` against the fake API server: the controller and its write
//! queue.
//!
//! One test binary for the folder; each module tests one part of it.

#[cfg(test)]
mod controller;
#[cfg(test)]
mod drift;
#[cfg(test)]
mod writes;
