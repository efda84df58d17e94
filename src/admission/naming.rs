//! PURE: names and hosts within Kubernetes' and Knative's DNS rules.
//!
//! Owns the deterministic KService name of an app identity (the Flyte platform's rule, kept
//! byte-for-byte so both writers agree), DNS-1035 and DNS-1123 label checks (the DNS-1123 shape
//! itself is [`crate::flags::is_dns_label`]), label-value checks, the route-host budget and the
//! endpoint-suffix template. Never does I/O.

use sha2::{Digest, Sha256};

use crate::flags::is_dns_label;

/// The longest DNS label Kubernetes and Knative accept.
pub const MAX_LABEL: usize = 63;
/// The longest `generateName` prefix: the API server appends 5 random characters.
pub const MAX_GENERATE_NAME: usize = MAX_LABEL - 5;
/// The longest host name (RFC 1123).
pub const MAX_HOST: usize = 253;
/// How many characters of the raw name a hashed name keeps.
const HASHED_PREFIX: usize = 54;

/// The deterministic KService name of an app identity, and whether it had to be hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppName {
    pub name: String,
    pub hashed: bool,
}

/// `lower(name-project-domain)`, or its first 54 characters plus `-` and 8 hex characters of
/// SHA-256 over `project/domain/name` when that would exceed 63 characters.
pub fn app_name(project: &str, domain: &str, name: &str) -> AppName {
    let raw = format!("{name}-{project}-{domain}").to_lowercase();
    if raw.len() <= MAX_LABEL {
        return AppName {
            name: raw,
            hashed: false,
        };
    }
    let digest = Sha256::digest(format!("{project}/{domain}/{name}").as_bytes());
    let cut = floor_char_boundary(&raw, HASHED_PREFIX);
    AppName {
        name: format!("{}-{}", &raw[..cut], hex::encode(&digest[..4])),
        hashed: true,
    }
}

/// Why a string is not a DNS-1035 label, or `None` when it is one.
pub fn dns1035_problem(value: &str) -> Option<String> {
    let mut problems = Vec::new();
    if value.len() > MAX_LABEL {
        problems.push(format!(
            "is {} characters long, more than {MAX_LABEL}",
            value.len()
        ));
    }
    if !is_dns1035_shape(value) {
        problems.push(
            "must start with a lower-case letter, contain only lower-case letters, digits and '-', \
             and end with a letter or digit"
                .to_string(),
        );
    }
    (!problems.is_empty()).then(|| problems.join(" and "))
}

/// Why `value` is not a DNS-1123 label (a namespace, a container or volume name), or `None`.
pub fn dns1123_problem(value: &str) -> Option<&'static str> {
    (!is_dns_label(value)).then_some(
        "is not a DNS-1123 label: use 1 to 63 lower-case letters, digits and '-', \
         starting and ending with a letter or digit",
    )
}

/// Why a `generateName` is not a valid prefix, or `None`. The API server appends 5 characters,
/// so the prefix may end with `-` and must leave room for them.
pub fn generate_name_problem(prefix: &str) -> Option<String> {
    let mut problems = Vec::new();
    if prefix.len() > MAX_GENERATE_NAME {
        problems.push(format!(
            "is {} characters long, more than {MAX_GENERATE_NAME} (the API server appends 5)",
            prefix.len()
        ));
    }
    // Any 5 lower-case letters or digits may follow, so check the prefix as if "a" followed.
    if !is_dns1035_shape(&format!("{prefix}a")) {
        problems.push(
            "must start with a lower-case letter and contain only lower-case letters, digits and '-'"
                .to_string(),
        );
    }
    (!problems.is_empty()).then(|| problems.join(" and "))
}

/// Why a string is not a valid Kubernetes label value, or `None`.
pub fn label_value_problem(value: &str) -> Option<String> {
    if value.len() > MAX_LABEL {
        return Some(format!(
            "is {} characters long, more than {MAX_LABEL}",
            value.len()
        ));
    }
    let bytes = value.as_bytes();
    let inner_ok = bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let ends_ok = bytes.first().is_none_or(u8::is_ascii_alphanumeric)
        && bytes.last().is_none_or(u8::is_ascii_alphanumeric);
    (!(inner_ok && ends_ok)).then(|| {
        "must contain only letters, digits, '-', '_' and '.', and start and end with a letter or digit"
            .to_string()
    })
}

fn is_dns1035_shape(value: &str) -> bool {
    let bytes = value.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_lowercase()
        && (last.is_ascii_lowercase() || last.is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// The largest char boundary of `s` at or before byte `at`.
pub fn floor_char_boundary(s: &str, at: usize) -> usize {
    (0..=at.min(s.len()))
        .rev()
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0)
}

/// A Knative route-host template such as `{{.Name}}.{{.Namespace}}.{{.Domain}}`, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainTemplate {
    parts: Vec<Part>,
}

/// One piece of a domain template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Name,
    Namespace,
}

/// A domain template that uses something other than `.Name`, `.Namespace` and `.Domain`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "domain template {template:?} uses {field:?}; only {{{{.Name}}}}, {{{{.Namespace}}}} and {{{{.Domain}}}} are supported"
)]
pub struct TemplateError {
    pub template: String,
    pub field: String,
}

impl DomainTemplate {
    /// Knative's default template.
    pub const DEFAULT: &'static str = "{{.Name}}.{{.Namespace}}.{{.Domain}}";

    /// A template for `domain`; fails on fields this webhook cannot render.
    pub fn new(template: &str, domain: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut rest = template;
        while let Some(start) = rest.find("{{") {
            let end = rest[start..]
                .find("}}")
                .map_or(rest.len(), |e| start + e + 2);
            let field = rest[start..end]
                .trim_matches(|c| c == '{' || c == '}')
                .trim();
            push_text(&mut parts, &rest[..start]);
            match field {
                ".Name" => parts.push(Part::Name),
                ".Namespace" => parts.push(Part::Namespace),
                ".Domain" => push_text(&mut parts, domain),
                _ => {
                    return Err(TemplateError {
                        template: template.to_string(),
                        field: field.to_string(),
                    });
                }
            }
            rest = &rest[end..];
        }
        push_text(&mut parts, rest);
        Ok(Self { parts })
    }

    /// The route host of a Service `name` in `namespace`.
    pub fn host(&self, name: &str, namespace: &str) -> String {
        let mut host = String::with_capacity(128);
        for part in &self.parts {
            host.push_str(match part {
                Part::Text(text) => text,
                Part::Name => name,
                Part::Namespace => namespace,
            });
        }
        host
    }

    /// Why the route host of `name` in `namespace` would be invalid, or `None`.
    pub fn host_problem(&self, name: &str, namespace: &str) -> Option<String> {
        let host = self.host(name, namespace);
        if host.len() > MAX_HOST {
            return Some(format!(
                "gives the route host {host:?} of {} characters, more than {MAX_HOST}",
                host.len()
            ));
        }
        host.split('.')
            .find(|label| label.len() > MAX_LABEL)
            .map(|label| {
                format!(
                    "gives the route host {host:?} whose label {label:?} has {} characters, more than {MAX_LABEL}",
                    label.len()
                )
            })
    }
}

fn push_text(parts: &mut Vec<Part>, text: &str) {
    if text.is_empty() {
        return;
    }
    match parts.last_mut() {
        Some(Part::Text(previous)) => previous.push_str(text),
        _ => parts.push(Part::Text(text.to_string())),
    }
}

impl Default for DomainTemplate {
    fn default() -> Self {
        Self {
            parts: vec![
                Part::Name,
                Part::Text(".".to_string()),
                Part::Namespace,
                Part::Text(".example.com".to_string()),
            ],
        }
    }
}

/// Render the endpoint-suffix template: `{{ project }}` and `{{ domain }}`, lower-cased.
pub fn render_suffix(template: &str, project: &str, domain: &str) -> String {
    template
        .replace("{{ project }}", &project.to_lowercase())
        .replace("{{ domain }}", &domain.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_names_follow_the_platform_rule() {
        let a54 = "a".repeat(54);
        let a55 = "a".repeat(55);
        let cases: &[(&str, &str, &str, String, bool)] = &[
            ("myapp", "proj", "dev", "myapp-proj-dev".into(), false),
            ("MyApp", "proj", "dev", "myapp-proj-dev".into(), false),
            (
                "my-long-service-name-v1",
                "proj",
                "dev",
                "my-long-service-name-v1-proj-dev".into(),
                false,
            ),
            (
                "my-long-service-name-v2",
                "proj",
                "dev",
                "my-long-service-name-v2-proj-dev".into(),
                false,
            ),
            (
                "this-is-a-very-long-app-name-that-exceeds-the-kubernetes-dns-label-limit",
                "proj",
                "dev",
                "this-is-a-very-long-app-name-that-exceeds-the-kubernet-3111c9c5".into(),
                true,
            ),
            (&a54, "proj", "dev", format!("{a54}-proj-dev"), false),
            (&a55, "proj", "dev", format!("{a54}-1075dd02"), true),
            ("svc", "team", "prod-x", "svc-team-prod-x".into(), false),
            ("svc", "team-prod", "x", "svc-team-prod-x".into(), false),
            ("myapp", "PROJ", "Dev", "myapp-proj-dev".into(), false),
            ("9lives", "proj", "dev", "9lives-proj-dev".into(), false),
        ];
        for (name, project, domain, want, hashed) in cases {
            let got = app_name(project, domain, name);
            assert_eq!(got.name, *want, "{name}/{project}/{domain}");
            assert_eq!(got.hashed, *hashed, "{name}");
            assert!(got.name.len() <= MAX_LABEL);
        }
    }

    #[test]
    fn dns1035_labels() {
        let ok = ["a", "myapp-proj-dev", "a-1", &"a".repeat(63)];
        for v in ok {
            assert_eq!(dns1035_problem(v), None, "{v}");
        }
        let bad = [
            "",
            "9lives",
            "my_app",
            "MyApp",
            "a-",
            "-a",
            "a.b",
            &"a".repeat(64),
        ];
        for v in bad {
            assert!(dns1035_problem(v).is_some(), "{v}");
        }
        assert!(
            dns1035_problem(&"a".repeat(64))
                .unwrap()
                .contains("64 characters")
        );
    }

    #[test]
    fn generate_name_prefixes() {
        for v in ["app-", "app", "a-b-", &"a".repeat(58)] {
            assert_eq!(generate_name_problem(v), None, "{v}");
        }
        for v in ["-app", "App-", "9-", &"a".repeat(59)] {
            assert!(generate_name_problem(v).is_some(), "{v}");
        }
    }

    #[test]
    fn label_values() {
        for v in ["", "proj", "My.Project_1", &"p".repeat(63)] {
            assert_eq!(label_value_problem(v), None, "{v}");
        }
        for v in ["-proj", "proj-", "a/b", "a b", &"p".repeat(64)] {
            assert!(label_value_problem(v).is_some(), "{v}");
        }
    }

    #[test]
    fn suffix_template_vectors() {
        let t = "{{ project }}-{{ domain }}";
        assert_eq!(render_suffix(t, "myproject", "dev"), "myproject-dev");
        assert_eq!(render_suffix(t, "MyProject", "Dev"), "myproject-dev");
        assert_eq!(render_suffix(t, "proj", "prod"), "proj-prod");
        assert_eq!(
            render_suffix("custom-{{ domain }}", "proj", "dev"),
            "custom-dev"
        );
        assert_eq!(render_suffix("", "proj", "dev"), "");
    }

    #[test]
    fn route_host_budget() {
        let t = DomainTemplate::new(DomainTemplate::DEFAULT, "example.com").unwrap();
        assert_eq!(t.host("app", "ns"), "app.ns.example.com");
        assert_eq!(t.host_problem("app", "ns"), None);
        let joined =
            DomainTemplate::new("{{.Name}}-{{.Namespace}}.{{.Domain}}", "example.com").unwrap();
        let name = "a".repeat(40);
        let ns = "b".repeat(30);
        assert!(
            joined
                .host_problem(&name, &ns)
                .unwrap()
                .contains("71 characters")
        );
        assert!(DomainTemplate::new("{{.Annotations.x}}.{{.Domain}}", "d").is_err());
        let spaced = DomainTemplate::new("{{ .Name }}-x.{{.Domain}}", "d.io").unwrap();
        assert_eq!(spaced.host("a", "b"), "a-x.d.io");
        assert_eq!(DomainTemplate::default(), t);
    }
}
