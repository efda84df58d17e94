//! The Kubernetes API calls this program makes, declared beside the code that makes them.
//!
//! Each module that talks to the API server exports a `pub const API_CALLS: &[ApiCall]`; a test
//! compares their union with the RBAC rules in `manifests/`, so the manifests grant exactly what
//! the code uses.

/// One API call: the verb on a resource of an API group (`""` is the core group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiCall {
    pub group: &'static str,
    pub resource: &'static str,
    pub verb: &'static str,
}

impl ApiCall {
    /// A call of `verb` on `resource` in `group`.
    pub const fn new(group: &'static str, resource: &'static str, verb: &'static str) -> Self {
        Self {
            group,
            resource,
            verb,
        }
    }
}
