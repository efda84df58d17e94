//! PURE: the names a status request carries (the path's namespace and name, the query's
//! filters) checked to be ones Kubernetes could hold, before anything else looks at them: a
//! namespace is a DNS-1123 label, a KService name a DNS-1035 label, a project or domain a label
//! value, each at most 63 bytes. So no review is sent, and nothing is cached or kept for a
//! stream, for a string no app can have.
//!
//! Only checks; never answers HTTP (that is the routes', in http.rs).

use crate::admission::naming::{
    dns1035_problem, dns1123_problem, floor_char_boundary, label_value_problem,
};
use crate::watch::hub::Filter;

/// How much of a refused value its message quotes.
const SHOWN_BYTES: usize = 64;

/// A name that no app can have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {shown} {problem}")]
pub struct BadName {
    /// Which value: `namespace`, `name`, `project` or `domain`.
    what: &'static str,
    /// The value, escaped and cut to [`SHOWN_BYTES`].
    shown: String,
    problem: String,
}

/// `value` quoted and escaped, its first [`SHOWN_BYTES`] bytes only, with its length when cut.
fn shown(value: &str) -> String {
    let cut = floor_char_boundary(value, SHOWN_BYTES);
    match cut < value.len() {
        true => format!("{:?}… ({} bytes)", &value[..cut], value.len()),
        false => format!("{value:?}"),
    }
}

fn bad(what: &'static str, value: &str, problem: Option<String>) -> Result<(), BadName> {
    match problem {
        None => Ok(()),
        Some(problem) => Err(BadName {
            what,
            shown: shown(value),
            problem,
        }),
    }
}

fn namespace(value: &str) -> Result<(), BadName> {
    let problem = dns1123_problem(value).map(|p| format!("{p} (a namespace name)"));
    bad("namespace", value, problem)
}

fn name(value: &str) -> Result<(), BadName> {
    let problem =
        dns1035_problem(value).map(|p| format!("{p} (a KService name is a DNS-1035 label)"));
    bad("name", value, problem)
}

/// The namespace and name of `/apps/{namespace}/{name}`.
pub fn check_path(ns: &str, app: &str) -> Result<(), BadName> {
    namespace(ns)?;
    name(app)
}

/// The filters of `/apps?…` and `/apps/watch?…`.
pub fn check_filter(filter: &Filter) -> Result<(), BadName> {
    if let Some(ns) = &filter.namespace {
        namespace(ns)?;
    }
    if let Some(app) = &filter.name {
        name(app)?;
    }
    for (what, value) in [("project", &filter.project), ("domain", &filter.domain)] {
        if let Some(value) = value {
            bad(what, value, label_value_problem(value))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_names_pass() {
        assert_eq!(check_path("team-a", "web"), Ok(()));
        assert_eq!(
            check_path("0ns", "a0"),
            Ok(()),
            "a namespace may start with a digit"
        );
        assert_eq!(check_path(&"n".repeat(63), &"a".repeat(63)), Ok(()));
        let filter = Filter {
            namespace: Some("team-a".into()),
            name: Some("web".into()),
            project: Some("Flyte_Project.1".into()),
            domain: Some("dev".into()),
        };
        assert_eq!(check_filter(&filter), Ok(()));
        assert_eq!(check_filter(&Filter::default()), Ok(()));
    }

    #[test]
    fn malformed_and_oversized_names_are_refused_quoting_a_bounded_value() {
        let long = "a".repeat(60_000);
        let cases: [(&str, &str, &str); 6] = [
            ("Team", "web", "namespace \"Team\" is not a DNS-1123 label"),
            ("", "web", "namespace \"\" is not a DNS-1123 label"),
            (
                "team",
                "0web",
                "name \"0web\" must start with a lower-case letter",
            ),
            ("team", "a/b", "name \"a/b\""),
            (&long, "web", "namespace \"aaaa"),
            ("team", "we\nb\u{1b}", "name \"we\\nb\\u{1b}\""),
        ];
        for (ns, app, want) in cases {
            let error = check_path(ns, app).unwrap_err().to_string();
            assert!(error.starts_with(want), "{ns:.20}/{app}: {error}");
            assert!(
                error.len() < 400,
                "the message stays short: {}",
                error.len()
            );
        }
        let error = check_path(&long, "web").unwrap_err().to_string();
        assert!(error.contains("… (60000 bytes)"), "{error}");
        let error = check_path("team", &"a".repeat(64)).unwrap_err().to_string();
        assert!(
            error.contains("64 characters long, more than 63"),
            "{error}"
        );
    }

    #[test]
    fn every_filter_is_checked() {
        let cases = [
            (
                Filter {
                    namespace: Some("A".into()),
                    ..Filter::default()
                },
                "namespace",
            ),
            (
                Filter {
                    name: Some("-x".into()),
                    ..Filter::default()
                },
                "name",
            ),
            (
                Filter {
                    project: Some("x".repeat(64)),
                    ..Filter::default()
                },
                "project",
            ),
            (
                Filter {
                    domain: Some("a b".into()),
                    ..Filter::default()
                },
                "domain",
            ),
        ];
        for (filter, what) in cases {
            let error = check_filter(&filter).unwrap_err().to_string();
            assert!(error.starts_with(what), "{error}");
        }
    }
}
