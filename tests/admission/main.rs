//! The pure admission pipeline of `src/admission/`: the rules, golden reviews, properties, the
//! platform writers, the sidecars, the stop record and the revision guard (over the real server).
//!
//! One test binary for the folder; each module tests one part of it.

/// The default log shipper every sidecar test catalogue starts with, as a literal: a file's
/// catalogue is `concat!(shipper!(), "…its other templates…")`.
macro_rules! shipper {
    () => {
        r#"
default: [shipper]
templates:
  shipper:
    containers:
      - name: log-shipper
        image: fluent/fluent-bit:3.1
        env:
          - {name: TAGS, value: "ns={{ .Namespace }},app={{ .AppName }},ksvc={{ .Name }}"}
        volumeMounts: [{name: app-logs, mountPath: /var/log/app}]
    volumes: [{name: app-logs, emptyDir: {}}]
"#
    };
}

#[cfg(test)]
mod golden;
#[cfg(test)]
mod platform;
#[cfg(test)]
mod platform_replay;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod revision_guard;
#[cfg(test)]
mod rules;
#[cfg(test)]
mod sidecar_catalogue;
#[cfg(test)]
mod sidecar_fronting;
#[cfg(test)]
mod sidecar_props;
#[cfg(test)]
mod sidecar_upgrades;
#[cfg(test)]
mod sidecars;
#[cfg(test)]
mod stop_record;
