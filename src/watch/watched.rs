//! A cached view as the watchers and the API client decode it: the view ([`super::view`]) and
//! the kube `ObjectMeta` that kube-runtime's watcher and reflector read (name, namespace and
//! the resourceVersion it resumes from). The loop's store keeps the view alone
//! ([`super::store`]), so the `ObjectMeta` lives only as long as the event that brought it.
//! Must never do I/O.

use std::borrow::{Borrow, Cow};
use std::ops::{Deref, DerefMut};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};

use super::view::{GROUP, KService, Metadata, Revision, VERSION};

/// A view the watchers decode: a Knative object of one kind with its cached [`Metadata`].
pub trait View {
    /// Its cached metadata.
    fn metadata(&self) -> &Metadata;
}

impl View for KService {
    fn metadata(&self) -> &Metadata {
        &self.metadata
    }
}

impl View for Revision {
    fn metadata(&self) -> &Metadata {
        &self.metadata
    }
}

/// A view as decoded from the API server, with the `ObjectMeta` kube reads; derefs to the view.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Watched<K> {
    metadata: ObjectMeta,
    view: K,
}

impl<K: View> Watched<K> {
    /// The view with the `ObjectMeta` kube reads (name, namespace, resourceVersion) made from
    /// its metadata.
    pub fn new(view: K) -> Self {
        let m = view.metadata();
        let text = |s: &str| Some(s.to_owned()).filter(|s| !s.is_empty());
        let metadata = ObjectMeta {
            name: text(&m.name),
            namespace: text(&m.namespace),
            resource_version: m.resource_version.as_deref().map(str::to_owned),
            ..ObjectMeta::default()
        };
        Self { metadata, view }
    }

    /// The view, without the `ObjectMeta`.
    pub fn into_view(self) -> K {
        self.view
    }
}

impl<K> Deref for Watched<K> {
    type Target = K;
    fn deref(&self) -> &K {
        &self.view
    }
}

impl<K> DerefMut for Watched<K> {
    /// The view; its name and namespace are what the `ObjectMeta` says (the store only trades
    /// them for equal shared copies).
    fn deref_mut(&mut self) -> &mut K {
        &mut self.view
    }
}

impl<K> Borrow<K> for Watched<K> {
    fn borrow(&self) -> &K {
        &self.view
    }
}

impl<'de, K: View + Deserialize<'de>> Deserialize<'de> for Watched<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        K::deserialize(d).map(Self::new)
    }
}

macro_rules! knative_resource {
    ($ty:ty, $kind:literal, $plural:literal) => {
        impl kube::Resource for Watched<$ty> {
            type DynamicType = ();
            type Scope = kube::core::NamespaceResourceScope;
            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($kind)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(GROUP)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(VERSION)
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed($plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

knative_resource!(KService, "Service", "services");
knative_resource!(Revision, "Revision", "revisions");

#[cfg(test)]
mod tests {
    use kube::Resource;
    use serde_json::json;

    use super::*;

    #[test]
    fn kube_reads_name_namespace_and_resource_version_and_the_view_the_rest() {
        let watched: Watched<Revision> = serde_json::from_value(json!({
            "metadata": {"name": "a-00001", "namespace": "team", "uid": "u", "resourceVersion": "9",
                         "labels": {"serving.knative.dev/service": "a"}}
        }))
        .unwrap();
        let want = ObjectMeta {
            name: Some("a-00001".into()),
            namespace: Some("team".into()),
            resource_version: Some("9".into()),
            ..ObjectMeta::default()
        };
        assert_eq!(*watched.meta(), want);
        assert_eq!(watched.service(), Some("a"));
        assert_eq!(watched.into_view().metadata.uid.as_deref(), Some("u"));
    }
}
