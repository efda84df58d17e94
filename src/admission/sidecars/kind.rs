//! PURE: the two lists of a pod spec a sidecar template adds to, and where each lives.

use super::Template;
use crate::admission::ksvc;

/// The two lists a template adds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Container,
    Volume,
}

impl Kind {
    pub(super) const ALL: [Kind; 2] = [Kind::Container, Kind::Volume];

    pub(super) fn path(self) -> &'static [&'static str] {
        match self {
            Kind::Container => ksvc::CONTAINERS,
            Kind::Volume => ksvc::VOLUMES,
        }
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            Kind::Container => "container",
            Kind::Volume => "volume",
        }
    }

    /// The names a template adds.
    pub(super) fn of_template(self, t: &Template) -> &[String] {
        match self {
            Kind::Container => &t.container_names,
            Kind::Volume => &t.volume_names,
        }
    }
}
