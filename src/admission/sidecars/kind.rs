//! PURE: the two lists of a pod spec a sidecar template adds to, where each lives, and what a
//! template and a status record list of each.

use super::Template;
use super::record::{Injected, Status};
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

    /// The names a status record lists.
    pub(super) fn of_record(self, r: &Injected) -> &[String] {
        match self {
            Kind::Container => &r.containers,
            Kind::Volume => &r.volumes,
        }
    }

    /// Whether `status` lists `name`: then the item is the webhook's, not the user's.
    pub(super) fn listed(self, status: &Status, name: &str) -> bool {
        status
            .templates
            .iter()
            .any(|r| self.of_record(r).iter().any(|n| n == name))
    }
}
