//! The e2e suite: every promise of the README checked through a real kube-apiserver, etcd and
//! kube-controller-manager (built from their Go modules by `scripts/e2e-build.sh`, started by
//! `scripts/e2e-cluster.sh`), with `manifests/` applied by kubectl and `ksvc-webhook serve`
//! running under its ServiceAccount's identity (`support::control_plane`).
//!
//! Every test is `#[ignore]`d: `cargo test` never needs Go or a control plane. `make e2e` starts
//! the control plane, runs `cargo test --test e2e -- --ignored --test-threads=1` and stops it.

#[cfg(test)]
mod admission;
#[cfg(test)]
mod audit;
#[cfg(test)]
mod certs;
#[cfg(test)]
mod check;
#[cfg(test)]
mod guard;
#[cfg(test)]
mod helm;
#[cfg(test)]
mod install_window;
#[cfg(test)]
mod knative;
#[cfg(test)]
mod lease;
#[cfg(test)]
mod least_privilege;
#[cfg(test)]
mod missing_rule;
#[cfg(test)]
mod objects;
#[cfg(test)]
mod outage;
#[cfg(test)]
mod readmit;
#[cfg(test)]
mod reinvocation;
#[cfg(test)]
mod schema;
#[cfg(test)]
mod status_api;
#[cfg(test)]
mod watch;
