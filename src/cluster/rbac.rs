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

/// ClusterRoles every cluster ships (Kubernetes' bootstrap RBAC) that the manifests bind rather
/// than define, with the rules the API server gives them: the RBAC test needs them to see what a
/// binding to one grants.
pub const BUILTIN_CLUSTER_ROLES: &[(&str, &[ApiCall])] = &[(
    // What metrics-server and kube-rbac-proxy bind: review tokens and access for others.
    "system:auth-delegator",
    &[
        ApiCall::new("authentication.k8s.io", "tokenreviews", "create"),
        ApiCall::new("authorization.k8s.io", "subjectaccessreviews", "create"),
    ],
)];
