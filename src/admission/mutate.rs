//! PURE: the edits admission makes to a valid KService, and their inverse.
//!
//! [`inject`] converges an object on what the webhook owns: the managed name, the stop state,
//! `INTERNAL_APP_ENDPOINT_PATTERN`, the selected sidecars (see [`crate::admission::sidecars`]), the
//! managed-app annotations and the spec SHA. [`strip`] takes all of it away again, giving the
//! object as the user wrote it; the spec SHA is computed over `strip`'s result, so it is the same
//! whether or not the object was already mutated, stopped or given sidecars.

use serde_json::json;

use crate::json::Node;

use crate::admission::ksvc::{self, Identity};
use crate::admission::naming::{self, AppName};
use crate::admission::sidecars;
use crate::admission::spec_sha::spec_sha;
use crate::admission::stop::{self, Restore};
use crate::json::edit::Editor;
use crate::keys;

/// Settings the edits depend on.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Renders the endpoint suffix of managed apps, e.g. `{{ project }}-{{ domain }}`.
    pub suffix_template: String,
    /// Whether the cluster allows `initial-scale: "0"` (config-autoscaler
    /// `allow-zero-initial-scale`); only then does a stop set it.
    pub allow_zero_initial_scale: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            suffix_template: "{{ project }}-{{ domain }}".to_string(),
            allow_zero_initial_scale: false,
        }
    }
}

/// What the edits need to know beyond the object.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    /// The namespace the object lives in (from the object, else from the request).
    pub namespace: &'a str,
    /// The managed-app identity, if the object carries one.
    pub identity: Option<&'a Identity>,
    /// The deterministic name of the identity, if any.
    pub app_name: Option<&'a AppName>,
    /// The parsed stop-restore record.
    pub restore: Option<Restore>,
    /// The sidecars to converge on (checked by [`sidecars::plan`] before any edit).
    pub sidecars: sidecars::Plan<'a>,
}

/// The value of `INTERNAL_APP_ENDPOINT_PATTERN` for an app in `namespace`.
pub fn endpoint_pattern(
    settings: &Settings,
    identity: Option<&Identity>,
    namespace: &str,
) -> String {
    let suffix = identity
        .map(|id| naming::render_suffix(&settings.suffix_template, &id.project, &id.domain))
        .unwrap_or_default();
    // An empty suffix (an empty template) must not leave a dangling `-` in the host, as the
    // platform's own code does (`http://{app_fqdn}-.ns…`).
    match suffix.as_str() {
        "" => format!("http://{{app_fqdn}}.{namespace}.svc.cluster.local"),
        suffix => format!("http://{{app_fqdn}}-{suffix}.{namespace}.svc.cluster.local"),
    }
}

/// Converge `ed`'s object on everything the webhook owns; returns warnings for the user.
pub fn inject(ed: &mut Editor, target: Target, settings: &Settings) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(app) = target.app_name
        && ksvc::name(ed.doc()).is_empty()
    {
        ed.set(&["metadata", "name"], Node::from(app.name.clone()));
    }
    let stopped = ksvc::stopped(ed.doc());
    stop::converge(
        ed,
        stopped,
        target.restore,
        settings.allow_zero_initial_scale,
    );
    warnings.extend(sidecars::converge(ed, &target.sidecars, target.namespace));
    let pattern = endpoint_pattern(settings, target.identity, target.namespace);
    if let Some(replaced) = upsert_endpoint_env(ed, &pattern) {
        warnings.push(format!(
            "{}: replaced {replaced:?} with {pattern:?}; the webhook owns this variable",
            keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN
        ));
    }
    if let Some(id) = target.identity {
        set_annotation(ed, keys::ANNOTATION_APP_MANAGED, "true");
        set_annotation(ed, keys::ANNOTATION_APP_ID, &id.app_id());
    }
    let sha = stripped_sha(ed);
    set_annotation(ed, keys::ANNOTATION_SPEC_SHA, &sha);
    warnings
}

fn set_annotation(ed: &mut Editor, key: &str, value: &str) {
    ed.set(
        &[ksvc::ANNOTATIONS, &[key]].concat(),
        Node::from(value.to_string()),
    );
}

/// Upsert the endpoint env var in the serving container; returns a different value it replaced.
fn upsert_endpoint_env(ed: &mut Editor, pattern: &str) -> Option<String> {
    let containers = ksvc::containers(ed.doc());
    let index = sidecars::app_container(ed.doc())?;
    let env = containers[index].get("env").and_then(Node::as_array);
    let matches: Vec<usize> = env
        .map(|env| {
            env.iter()
                .enumerate()
                .filter(|(_, e)| {
                    e.get("name").and_then(Node::as_str)
                        == Some(keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN)
                })
                .map(|(i, _)| i)
                .collect()
        })
        .unwrap_or_default();
    let idx = index.to_string();
    let env_path = [ksvc::CONTAINERS, &[idx.as_str(), "env"]].concat();
    let Some((&first, duplicates)) = matches.split_first() else {
        ed.push(
            &env_path,
            Node::from_json(
                json!({"name": keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN, "value": pattern}),
            ),
        );
        return None;
    };
    let existing = env.and_then(|e| e.get(first));
    let previous = existing
        .and_then(|e| e.get("value"))
        .and_then(Node::as_str)
        .map(str::to_string);
    let had_value_from = existing.is_some_and(|e| e.get("valueFrom").is_some());
    // Remove later duplicates first so the earlier indexes stay valid.
    for dup in duplicates.iter().rev() {
        let at = dup.to_string();
        ed.remove(&[env_path.as_slice(), &[at.as_str()]].concat());
    }
    let at = first.to_string();
    let entry = [env_path.as_slice(), &[at.as_str()]].concat();
    ed.set(
        &[entry.as_slice(), &["value"]].concat(),
        Node::from(pattern.to_string()),
    );
    ed.remove(&[entry.as_slice(), &["valueFrom"]].concat());
    let replaced = previous.as_deref() != Some(pattern) || had_value_from;
    replaced.then(|| previous.unwrap_or_else(|| "valueFrom".to_string()))
}

/// Take away everything [`inject`] adds: the object as the user wrote it. Returns `false` when
/// the stop-restore record or the sidecar status is unreadable (then what it governs is left as
/// it is).
pub fn strip(ed: &mut Editor) -> bool {
    let record = stop::restore_record(ed.doc());
    if let Ok(Some(record)) = &record {
        stop::start(ed, record);
    }
    let sidecars_read = sidecars::strip(ed);
    remove_endpoint_env(ed);
    for key in [
        keys::ANNOTATION_SPEC_SHA,
        keys::ANNOTATION_APP_MANAGED,
        keys::ANNOTATION_APP_ID,
    ] {
        ed.remove(&[ksvc::ANNOTATIONS, &[key]].concat());
    }
    stop::drop_empty_map(ed, ksvc::ANNOTATIONS);
    record.is_ok() && sidecars_read
}

fn remove_endpoint_env(ed: &mut Editor) {
    let containers = ksvc::containers(ed.doc());
    let Some(index) = sidecars::app_container(ed.doc()) else {
        return;
    };
    let Some(env) = containers[index].get("env").and_then(Node::as_array) else {
        return;
    };
    let ours: Vec<usize> = env
        .iter()
        .enumerate()
        .filter(|(_, e)| {
            e.get("name").and_then(Node::as_str) == Some(keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN)
        })
        .map(|(i, _)| i)
        .collect();
    let idx = index.to_string();
    let env_path = [ksvc::CONTAINERS, &[idx.as_str(), "env"]].concat();
    for i in ours.iter().rev() {
        let at = i.to_string();
        ed.remove(&[env_path.as_slice(), &[at.as_str()]].concat());
    }
    // An env list the webhook created is removed with its last entry: empty means absent.
    if ksvc::get(ed.doc(), &env_path)
        .and_then(Node::as_array)
        .is_some_and(Vec::is_empty)
    {
        ed.remove(&env_path);
    }
}

/// The spec SHA of `ed`'s object as the user wrote it: stripped in place, hashed, put back.
fn stripped_sha(ed: &mut Editor) -> String {
    let mut scratch = ed.scratch();
    strip(&mut scratch);
    let sha = spec_sha(scratch.doc().get("spec").unwrap_or(&Node::Null));
    scratch.undo();
    sha
}

/// The spec as the user wrote it: `doc.spec` with everything the webhook injects taken away.
/// The same [`strip`] admission hashes through, on a copy (for the `sha` command).
pub fn user_spec(doc: &serde_json::Value) -> serde_json::Value {
    let mut copy = Node::borrow_json(doc);
    strip(&mut Editor::new(&mut copy));
    copy.get("spec")
        .map_or(serde_json::Value::Null, Node::to_json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_patterns_follow_the_platform_vectors() {
        let id = Identity {
            project: "proj".into(),
            domain: "dev".into(),
            name: "myapp".into(),
        };
        let with = |template: &str| Settings {
            suffix_template: template.into(),
            ..Settings::default()
        };
        let cases = [
            (
                with("{{ project }}-{{ domain }}"),
                Some(&id),
                "http://{app_fqdn}-proj-dev.flyte.svc.cluster.local",
            ),
            (
                with("custom-{{ domain }}"),
                Some(&id),
                "http://{app_fqdn}-custom-dev.flyte.svc.cluster.local",
            ),
            (
                with(""),
                Some(&id),
                "http://{app_fqdn}.flyte.svc.cluster.local",
            ),
            (
                Settings::default(),
                None,
                "http://{app_fqdn}.flyte.svc.cluster.local",
            ),
        ];
        for (settings, identity, want) in cases {
            assert_eq!(endpoint_pattern(&settings, identity, "flyte"), want);
        }
    }
}
