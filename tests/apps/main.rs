//! The status API of `src/apps/`: authentication and authorization, its limits, its metrics and
//! its HTTP routes and streams.
//!
//! One test binary for the folder; each module tests one part of it.

#[cfg(test)]
mod auth;
#[cfg(test)]
mod http;
#[cfg(test)]
mod limits;
#[cfg(test)]
mod metrics;
