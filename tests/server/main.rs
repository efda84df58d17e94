//! Integration tests of `ksvc-webhook serve` over real TLS sockets on 127.0.0.1, acting like
//! kube-apiserver: verify the server against a generated CA, POST AdmissionReviews, check the
//! answers. No timed assertions: waits are bounded polls.

// `cfg(test)` marks these as test code for clippy's `allow-unwrap-in-tests`.
#[cfg(test)]
mod cli;
#[cfg(test)]
mod hostile;
#[cfg(test)]
mod lifecycle;
#[cfg(test)]
mod limits;
#[cfg(test)]
mod otlp;
#[cfg(test)]
mod requests;
#[cfg(test)]
mod scale;
#[cfg(test)]
mod watch_gate;
