//! PURE: the edits admission makes to a valid KService, and their inverse.
//!
//! [`inject`] converges an object on what the webhook owns: the managed name, the stop state,
//! `INTERNAL_APP_ENDPOINT_PATTERN`, the selected sidecars (see [`crate::admission::sidecars`]), the
//! managed-app label and annotation and the spec SHA. [`strip`] takes all of it away again, giving
//! the object as the user wrote it; the spec SHA is computed over `strip`'s result, so it is the
//! same whether or not the object was already mutated, stopped or given sidecars. It is computed
//! once the user's own fields are settled (the name, a dropped `initial-scale`, the stop state) and
//! before the sidecars and the endpoint variable are converged: `strip` takes those away again
//! (the sidecar plan has refused an unreadable record and names that clash with the user's), so
//! hashing before them gives the same value without stripping what was just added. The SHA changes
//! only when that user spec does: on UPDATE an unchanged user spec keeps the stored value, and a
//! platform writer's own value is kept as written (see [`SpecSha`]).

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
    /// Where the `flyte.org/spec-sha` value comes from.
    pub spec_sha: SpecSha,
}

/// Where the `flyte.org/spec-sha` value comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SpecSha {
    /// The webhook's hash of the user spec, unless the user spec is unchanged from the stored
    /// object's (then the stored value stays, whoever wrote it).
    #[default]
    Computed,
    /// A platform writer's request: a value it wrote is kept as written (its Deploy compares it
    /// with its own hash); without one, as [`SpecSha::Computed`].
    AsWritten,
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

/// Converge `ed`'s object on everything the webhook owns; returns warnings for the user, or why
/// the spec SHA could not be computed (never a SHA of something else). `stored` is the stored
/// object on UPDATE: what a stopping write's `initial-scale` and an unchanged spec's SHA are
/// compared with (only hashed when its SHA annotation differs).
pub fn inject(
    ed: &mut Editor,
    target: Target,
    settings: &Settings,
    stored: Option<&mut Node>,
) -> Result<Vec<String>, crate::admission::spec_sha::Error> {
    let mut warnings = Vec::new();
    if let Some(app) = target.app_name
        && ksvc::name(ed.doc()).is_empty()
    {
        ed.set(&["metadata", "name"], Node::from(app.name.clone()));
    }
    if !settings.allow_zero_initial_scale {
        warnings.extend(stop::drop_zero_initial_scale(ed, stored.as_deref()));
    }
    let stopped = ksvc::stopped(ed.doc());
    stop::converge(
        ed,
        stopped,
        target.restore,
        settings.allow_zero_initial_scale,
    );
    let sha = match unchanged_sha(ed, stored.as_deref()) {
        Some(kept) => kept,
        // The plan read the sidecar status (and refused an unreadable one) from this object.
        None => stripped_sha(ed, Some(&target.sidecars.previous))?,
    };
    warnings.extend(sidecars::converge(ed, &target.sidecars, target.namespace));
    let pattern = endpoint_pattern(settings, target.identity, target.namespace);
    let handover = target.sidecars.handover.as_ref();
    if let Some(replaced) = upsert_endpoint_env(ed, &pattern, handover) {
        warnings.push(format!(
            "{}: replaced {replaced:?} with {pattern:?}; the webhook owns this variable",
            keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN
        ));
    }
    if let Some(id) = target.identity {
        ed.set(
            &[ksvc::LABELS, &[keys::LABEL_APP_MANAGED]].concat(),
            Node::from("true"),
        );
        set_annotation(ed, keys::ANNOTATION_APP_ID, &id.app_id());
    }
    // Migration: older releases marked managed apps with an annotation instead of the label.
    ed.remove(&[ksvc::ANNOTATIONS, &[keys::ANNOTATION_APP_MANAGED]].concat());
    if let Some(value) = spec_sha_value(ed.doc(), sha, target.spec_sha, stored)? {
        set_annotation(ed, keys::ANNOTATION_SPEC_SHA, &value);
    }
    Ok(warnings)
}

/// The `flyte.org/spec-sha` to write given `sha`, the user spec's hash; `None` keeps what the
/// object carries. The stored object's user spec is hashed only when its annotation differs from
/// `sha` (a platform's value, or a changed spec): the common UPDATE hashes once.
fn spec_sha_value(
    doc: &Node,
    sha: String,
    rule: SpecSha,
    stored: Option<&mut Node>,
) -> Result<Option<String>, crate::admission::spec_sha::Error> {
    let written = ksvc::entry(doc, ksvc::ANNOTATIONS, keys::ANNOTATION_SPEC_SHA);
    if rule == SpecSha::AsWritten && written.is_some() {
        return Ok(None);
    }
    let Some(old) = stored else {
        return Ok(Some(sha));
    };
    let Some(kept) = ksvc::entry(old, ksvc::ANNOTATIONS, keys::ANNOTATION_SPEC_SHA) else {
        return Ok(Some(sha));
    };
    if kept == sha {
        return Ok(Some(sha));
    }
    let kept = kept.to_string();
    Ok(match user_spec_sha(old)? == sha {
        true => Some(kept),
        false => Some(sha),
    })
}

/// The stored SHA of an UPDATE that is, so far, the stored object unchanged: the same object
/// hashes the same, so [`spec_sha_value`] would keep the stored value whatever the hash; nothing
/// is hashed. `None` when there is something to hash.
fn unchanged_sha(ed: &Editor, stored: Option<&Node>) -> Option<String> {
    let old = stored.filter(|_| !ed.recorded())?;
    let kept = ksvc::entry(old, ksvc::ANNOTATIONS, keys::ANNOTATION_SPEC_SHA)?;
    (old == ed.doc()).then(|| kept.to_owned())
}

/// The spec SHA of `doc` as the user wrote it (the document is left as it was).
pub fn user_spec_sha(doc: &mut Node) -> Result<String, crate::admission::spec_sha::Error> {
    stripped_sha(&mut Editor::new(doc), None)
}

fn set_annotation(ed: &mut Editor, key: &str, value: &str) {
    ed.set(
        &[ksvc::ANNOTATIONS, &[key]].concat(),
        Node::from(value.to_string()),
    );
}

/// Upsert the endpoint env var in the app's container (the one `handover` took the serving port
/// from, if any); returns a different value it replaced.
fn upsert_endpoint_env(
    ed: &mut Editor,
    pattern: &str,
    handover: Option<&sidecars::Handover>,
) -> Option<String> {
    let containers = ksvc::containers(ed.doc());
    let index = sidecars::app_container(ed.doc(), handover)?;
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
    strip_with(ed, None)
}

/// [`strip`], with the sidecar status already read from the object when it is `Some`.
fn strip_with(ed: &mut Editor, sidecars: Option<&sidecars::Status>) -> bool {
    let record = stop::restore_record(ed.doc());
    if let Ok(Some(record)) = &record {
        stop::start(ed, record);
    }
    let sidecars_read = match sidecars {
        Some(status) => {
            sidecars::strip_recorded(ed, status);
            true
        }
        None => sidecars::strip(ed),
    };
    remove_endpoint_env(ed);
    for key in [
        keys::ANNOTATION_SPEC_SHA,
        keys::ANNOTATION_APP_MANAGED,
        keys::ANNOTATION_APP_ID,
    ] {
        ed.remove(&[ksvc::ANNOTATIONS, &[key]].concat());
    }
    ed.remove(&[ksvc::LABELS, &[keys::LABEL_APP_MANAGED]].concat());
    stop::drop_empty_map(ed, ksvc::ANNOTATIONS);
    stop::drop_empty_map(ed, ksvc::LABELS);
    record.is_ok() && sidecars_read
}

/// Runs after [`sidecars::strip`] gave the serving port back: the app's container serves again.
fn remove_endpoint_env(ed: &mut Editor) {
    let containers = ksvc::containers(ed.doc());
    let Some(index) = sidecars::app_container(ed.doc(), None) else {
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
/// `sidecars` is its sidecar status when already read.
fn stripped_sha(
    ed: &mut Editor,
    sidecars: Option<&sidecars::Status>,
) -> Result<String, crate::admission::spec_sha::Error> {
    let mut scratch = ed.scratch();
    strip_with(&mut scratch, sidecars);
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
