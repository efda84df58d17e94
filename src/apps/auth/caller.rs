//! The caller of a status request once its token is reviewed: who the TokenReview said it is,
//! and the token itself, kept only for as long as the request (or the watch stream) that
//! carries it, so an open stream can re-check it.

use std::sync::Arc;

use crate::apps::auth::access::User;

/// An authenticated caller.
#[derive(Clone)]
pub struct Caller {
    pub(super) token: Arc<str>,
    /// Who the TokenReview said the caller is.
    pub user: User,
}

impl std::fmt::Debug for Caller {
    /// The user only: the token is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("user", &self.user.username)
            .finish_non_exhaustive()
    }
}
