//! The command line of `src/cli/` as a user runs it: the built binary against the fake API or
//! offline, its errors worded as kubectl words them, `check`, and every command block of the
//! README and docs/cli.md run as written.

#[cfg(test)]
mod app;
#[cfg(test)]
mod app_errors;
#[cfg(test)]
mod app_follow;
#[cfg(test)]
mod check;
#[cfg(test)]
mod completion;
#[cfg(test)]
mod drift;
#[cfg(test)]
mod explain;
#[cfg(test)]
mod inputs;
#[cfg(test)]
mod offline;
#[cfg(test)]
mod readme;
