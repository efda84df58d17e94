//! What the server tells about itself as it runs: its log lines ([`logs`]: the format, the
//! filter and the bounded writer) and its spans exported by OTLP/HTTP ([`otlp`]). Owns the
//! set-up only; what a span or a log line says is decided where it is written (`server::trace`).

pub mod logs;
pub mod otlp;
