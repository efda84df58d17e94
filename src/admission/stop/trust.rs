//! PURE: the stop-restore record is trusted only where it came from the webhook, since a start
//! writes what it says.
//!
//! [`record_for`] picks the record a write converges with: on UPDATE only the stored object's
//! counts (a stop records what the stored, running app had, since the platform stops in one merge
//! patch that carries the stopped values already), and only its entries for the keys a stop sets.
//! [`record_rules`] refuse a record a write brings or changes where a start would apply it, or that
//! names other keys; [`admitted_record_rules`] hold for every object admitted, after the edits.
//! Never edits the object: [`super::converge`] does.

use crate::admission::ksvc;
use crate::admission::violation::{Operation, Violation, violation};
use crate::json::Node;
use crate::keys;

use super::{Place, Restore, is_stop_key, path_of, restore_record, stop_keys};

/// The rule id of a record naming a key a stop never sets.
pub const RULE_KEYS: &str = "stop-record-keys";
/// The rule id of a record the write brought or changed where it would be applied.
pub const RULE_UNTRUSTED: &str = "stop-record-untrusted";

impl Restore {
    /// The entries naming a key no stop sets, as `labels[KEY]` / `templateAnnotations[KEY]`.
    fn foreign(&self) -> Vec<String> {
        let labels = self
            .labels
            .keys()
            .filter(|k| !is_stop_key(Place::ServiceLabel, k));
        let template = self
            .template_annotations
            .keys()
            .filter(|k| !is_stop_key(Place::TemplateAnnotation, k));
        labels
            .map(|k| shown(Place::ServiceLabel, k))
            .chain(template.map(|k| shown(Place::TemplateAnnotation, k)))
            .collect()
    }

    /// The record without the entries naming a key no stop sets (a record admitted before the
    /// webhook checked them keeps only what a stop could have written).
    fn only_stop_keys(mut self) -> Self {
        self.labels
            .retain(|k, _| is_stop_key(Place::ServiceLabel, k));
        self.template_annotations
            .retain(|k, _| is_stop_key(Place::TemplateAnnotation, k));
        self
    }
}

/// The record a write converges with: only ever one the webhook wrote, and only its entries for
/// the keys a stop sets.
/// - CREATE (`stored` is `None`): the object's own ([`record_rules`] admit one only on a stopped
///   app, naming only the stop keys).
/// - An UPDATE that stops the app: what the stored object (the running app) had for each key a
///   stop sets, so a start brings back the running app and removes what the stopping write added.
/// - An UPDATE that keeps it stopped: the stored object's record; without one (the app was
///   stopped past the webhook), what the stored object has for each stop key.
/// - An UPDATE that runs the app: the stored object's record when the write still carries it (a
///   start); none when the write dropped it.
///
/// A record the write brought or changed is never used.
pub fn record_for(doc: &Node, stored: Option<&Node>, zero_initial_scale: bool) -> Option<Restore> {
    let Some(old) = stored else {
        return restore_record(doc).ok().flatten();
    };
    let kept = || {
        restore_record(old)
            .ok()
            .flatten()
            .map(Restore::only_stop_keys)
    };
    match (ksvc::stopped(doc), ksvc::stopped(old)) {
        (true, false) => Some(recorded_from(old, zero_initial_scale)),
        (true, true) => kept().or_else(|| Some(recorded_from(old, zero_initial_scale))),
        (false, _) => match restore_record(doc) {
            Ok(Some(_)) => kept(),
            _ => None,
        },
    }
}

/// What `old` has for each key a stop sets.
fn recorded_from(old: &Node, zero_initial_scale: bool) -> Restore {
    let mut record = Restore::default();
    for (place, key, _) in stop_keys(zero_initial_scale) {
        let before = ksvc::get_str(old, &path_of(place, key)).map(str::to_string);
        record.slot(place).insert(key.to_string(), before);
    }
    record
}

/// The rules of the record a write carries, when it brought or changed it (the stored object's
/// record, carried unchanged, is the webhook's): it names only the keys a stop sets
/// (`stop-record-keys`), and it is not one a start would apply — neither on a running app's
/// CREATE nor on an UPDATE that leaves the app running (`stop-record-untrusted`). On an UPDATE that
/// leaves the app stopped, the webhook replaces it with the stored object's ([`record_for`]).
pub fn record_rules(
    operation: Operation,
    doc: &Node,
    stored: Option<&Node>,
    out: &mut Vec<Violation>,
) {
    // Absent, or unreadable (the `stop-record` rule says so).
    let Ok(Some(record)) = restore_record(doc) else {
        return;
    };
    let kept = stored.and_then(|old| restore_record(old).ok().flatten());
    if kept.as_ref() == Some(&record) {
        return;
    }
    out.extend(foreign_keys(&record));
    if ksvc::stopped(doc) {
        return;
    }
    let problem = match (operation, kept) {
        (Operation::Create, _) => {
            "is brought by the CREATE of a running app; the webhook writes this record when it \
             stops an app, and only that record is applied by a start"
        }
        (Operation::Update, Some(_)) => {
            "differs from the stored object's; a start applies only the record the webhook wrote \
             when it stopped the app"
        }
        (Operation::Update, None) => {
            "is not on the stored object; a start applies only the record the webhook wrote when \
             it stopped the app"
        }
    };
    out.push(violation(
        RULE_UNTRUSTED,
        record_path(),
        problem,
        "remove the annotation from this write (or write back the stored one unchanged)",
    ));
}

/// What every object the webhook admits holds true of its record, checked on the object after
/// the edits: it is readable, names only the keys a stop sets, and is gone once the app runs.
pub fn admitted_record_rules(doc: &Node, out: &mut Vec<Violation>) {
    let record = match restore_record(doc) {
        Ok(Some(record)) => record,
        Ok(None) => return,
        Err(err) => {
            out.push(unreadable(&err));
            return;
        }
    };
    out.extend(foreign_keys(&record));
    if !ksvc::stopped(doc) {
        out.push(violation(
            RULE_UNTRUSTED,
            record_path(),
            "is left on a running app",
            "remove the annotation; a start applies the record and removes it",
        ));
    }
}

/// The `stop-record` violation of a record that cannot be read.
pub fn unreadable(err: &serde_json::Error) -> Violation {
    violation(
        "stop-record",
        record_path(),
        format!("cannot be read ({err})"),
        "remove it; the webhook writes it when the app is stopped",
    )
}

/// The `stop-record-keys` violation of a record naming a key no stop sets, if it does.
fn foreign_keys(record: &Restore) -> Option<Violation> {
    let foreign = record.foreign();
    if foreign.is_empty() {
        return None;
    }
    let allowed: Vec<String> = stop_keys(true)
        .iter()
        .map(|(place, key, _)| shown(*place, key))
        .collect();
    Some(violation(
        RULE_KEYS,
        record_path(),
        format!(
            "names {}, which a stop never sets (a record may name only {})",
            foreign.join(", "),
            allowed.join(", ")
        ),
        "remove the annotation; the webhook writes it when the app is stopped",
    ))
}

/// A record entry as a person reads it: `labels[KEY]`, `templateAnnotations[KEY]`.
fn shown(place: Place, key: &str) -> String {
    match place {
        Place::ServiceLabel => format!("labels[{key}]"),
        Place::TemplateAnnotation => format!("templateAnnotations[{key}]"),
    }
}

fn record_path() -> String {
    format!("metadata.annotations[{}]", keys::ANNOTATION_STOP_RESTORE)
}
