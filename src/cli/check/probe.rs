//! PURE: what `ksvc-webhook check` concludes from asking the running server itself: the status
//! API through the API server's service proxy, and admission through a server dry run. Only an
//! answer the server could have written passes: the API server's own answers (a `Status` for a
//! Service that does not exist, or one without endpoints) name what is missing instead.

use serde_json::Value;

use super::eval::{HINT_READ, Install, Outcome};
use crate::keys;

/// What came back through the API server's service proxy, or why nothing did.
pub type Proxied = Result<ProxyAnswer, String>;

/// One answer through the service proxy.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyAnswer {
    pub code: u16,
    /// The `WWW-Authenticate` header, if any.
    pub challenge: Option<String>,
    /// The body as JSON (`Null` when it is not JSON).
    pub body: Value,
}

/// Who wrote a proxied answer.
enum Writer<'a> {
    /// The status API: a list of apps, or a refusal in its words.
    Ours,
    /// The API server itself, with its `Status` message.
    ApiServer(&'a str),
    /// Something else behind the Service.
    Unknown,
}

fn writer(answer: &ProxyAnswer) -> Writer<'_> {
    let body = &answer.body;
    if body["kind"] == "Status" && body["apiVersion"] == "v1" {
        return Writer::ApiServer(body["message"].as_str().unwrap_or_default());
    }
    let realm = answer
        .challenge
        .as_deref()
        .is_some_and(|c| c.contains("realm=\"ksvc-webhook\""));
    match (answer.code, body) {
        (200, Value::Array(_)) => Writer::Ours,
        (401, _) if realm => Writer::Ours,
        (403 | 429 | 503, Value::Object(map)) if map.len() == 1 && body["error"].is_string() => {
            Writer::Ours
        }
        _ => Writer::Unknown,
    }
}

/// The status API answers `GET /apps` itself.
pub fn status_api(answer: &Proxied, install: &Install) -> Outcome {
    const CHECK: &str = "status-api";
    let at = format!("Service {}/{}", install.namespace, install.service);
    let logs = format!(
        "read the server's log: kubectl -n {} logs deploy/{}",
        install.namespace, install.service
    );
    let answer = match answer {
        Ok(answer) => answer,
        Err(why) => {
            return Outcome::fail(
                CHECK,
                format!("the status API behind {at} gives no answer through the API server: {why}"),
                logs,
            );
        }
    };
    let code = answer.code;
    match writer(answer) {
        Writer::Ours => match code {
            200 => {
                let n = answer.body.as_array().map_or(0, Vec::len);
                Outcome::pass(
                    CHECK,
                    format!("the status API behind {at} answers ({n} app{})", plural(n)),
                )
            }
            401 => Outcome::pass(
                CHECK,
                format!(
                    "the status API behind {at} answers (401: it asks for a token, which the \
                     API server's proxy does not pass on)"
                ),
            ),
            403 | 429 => Outcome::pass(
                CHECK,
                format!("the status API behind {at} answers ({code})"),
            ),
            _ => Outcome::fail(
                CHECK,
                format!(
                    "the status API behind {at} answers {code}: {}",
                    answer.body["error"].as_str().unwrap_or_default()
                ),
                format!("{logs}; a 503 until its watch loop has synced passes with --wait"),
            ),
        },
        Writer::ApiServer(message) => {
            let (what, hint) = match code {
                404 => (
                    format!("{at} does not exist"),
                    format!(
                        "install the manifests (kubectl apply -k manifests/), or name the \
                         Service with --service and --webhook-namespace ({HINT_READ})"
                    ),
                ),
                503 | 502 => (
                    format!("no pod of {at} answers"),
                    format!(
                        "see whether the server runs: kubectl -n {} get pods -l \
                         app.kubernetes.io/name={}",
                        install.namespace, install.service
                    ),
                ),
                401 | 403 => (
                    format!("you may not reach {at} through the API server's service proxy"),
                    format!(
                        "the check needs get on services/proxy in {}",
                        install.namespace
                    ),
                ),
                _ => (format!("the API server answers {code} for {at}"), logs),
            };
            Outcome::fail(
                CHECK,
                format!("{what} (the API server answers {code}: {message})"),
                hint,
            )
        }
        Writer::Unknown => Outcome::fail(
            CHECK,
            format!("{at} answers {code}, but not as the status API does"),
            format!(
                "check that the Service selects the webhook's pods: kubectl -n {} get \
                 endpointslices -l kubernetes.io/service-name={}",
                install.namespace, install.service
            ),
        ),
    }
}

fn plural(n: usize) -> &'static str {
    super::eval::plural(n)
}

/// What a server dry run of a KService create came to.
#[derive(Debug, Clone, PartialEq)]
pub enum DryRun {
    /// Admitted: the object as admission left it.
    Admitted(Value),
    /// Refused by admission or validation: the API server's code and message.
    Refused { code: u16, message: String },
    /// The call failed otherwise; the message as kubectl words it.
    Failed(String),
}

/// A valid KService, without a name, as the platform writes one: its identity labels and one
/// container. The check sends it as a server dry run in `namespace`.
pub fn probe(namespace: &str) -> Value {
    serde_json::json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": {"namespace": namespace, "labels": {
            keys::LABEL_PROJECT: "ksvc-webhook-check", keys::LABEL_DOMAIN: "check",
            keys::LABEL_APP_NAME: "probe"}},
        "spec": {"template": {"spec": {"containers": [
            {"image": "registry.invalid/ksvc-webhook-check:probe"}]}}}
    })
}

/// An invalid KService: two identity labels of three, which admission refuses.
pub fn invalid_probe(namespace: &str) -> Value {
    let mut probe = probe(namespace);
    probe["metadata"]["name"] = "ksvc-webhook-check-invalid".into();
    if let Some(labels) = probe["metadata"]["labels"].as_object_mut() {
        labels.remove(keys::LABEL_DOMAIN);
    }
    probe
}

/// Admission answers a dry run: it names and annotates a valid KService and sets the env var,
/// and refuses an invalid one.
pub fn admission(valid: &DryRun, invalid: &DryRun, install: &Install, namespace: &str) -> Outcome {
    const CHECK: &str = "admission";
    let logs = format!(
        "kubectl -n {} logs deploy/{}",
        install.namespace, install.service
    );
    let not_called = || {
        Outcome::fail(
            CHECK,
            format!(
                "a server dry run in {namespace} admits a KService unchanged (no name, {} or \
                 env var): the webhook was not called",
                keys::ANNOTATION_SPEC_SHA
            ),
            format!(
                "check that {namespace} is not opted out and that the \
                 MutatingWebhookConfiguration's rules select it; with failurePolicy Ignore a \
                 webhook that cannot be called is skipped without a word"
            ),
        )
    };
    let object = match valid {
        DryRun::Admitted(object) => object,
        // The probe has no name: only the webhook gives it one, so without the webhook the API
        // server's own validation refuses it.
        DryRun::Refused { message, .. } if message.contains("name or generateName is required") => {
            return not_called();
        }
        DryRun::Refused { message, .. } if message.contains("failed calling webhook") => {
            return Outcome::fail(
                CHECK,
                format!("the API server cannot call the webhook: {message}"),
                format!(
                    "the endpoints, certificate and caBundle checks say why; the server's log: \
                     {logs}"
                ),
            );
        }
        DryRun::Refused { code, message } => {
            return Outcome::fail(
                CHECK,
                format!(
                    "admission refuses a valid KService in {namespace} (server dry run, {code}): \
                     {message}"
                ),
                format!("the policy or the server refuses every write: see its flags and {logs}"),
            );
        }
        DryRun::Failed(why) => {
            return Outcome::fail(
                CHECK,
                format!("cannot send a server dry run of a KService in {namespace}: {why}"),
                format!(
                    "it needs create on services.serving.knative.dev in {namespace}; pick \
                     another namespace with --probe-namespace"
                ),
            );
        }
    };
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    let name = text("/metadata/name");
    let sha = object["metadata"]["annotations"][keys::ANNOTATION_SPEC_SHA].as_str();
    let env = object
        .pointer("/spec/template/spec/containers/0/env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|e| e["name"] == keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN)
        .and_then(|e| e["value"].as_str());
    let (Some(name), Some(sha), Some(env)) = (name, sha, env) else {
        return not_called();
    };
    let admitted = format!(
        "name {name}, {} {sha}, env {}={env}",
        keys::ANNOTATION_SPEC_SHA,
        keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN
    );
    match invalid {
        DryRun::Refused { .. } => Outcome::pass(
            CHECK,
            format!(
                "admission answers a server dry run in {namespace}: {admitted}; an invalid \
                 KService is refused"
            ),
        ),
        DryRun::Admitted(_) => Outcome::fail(
            CHECK,
            format!(
                "admission mutates ({admitted}) but admits an invalid KService (two identity \
                 labels of three) in {namespace}"
            ),
            format!(
                "another webhook may undo the refusal, or the server runs an old policy: {logs}"
            ),
        ),
        DryRun::Failed(why) => Outcome::fail(
            CHECK,
            format!("cannot send a server dry run of an invalid KService in {namespace}: {why}"),
            HINT_READ,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const INSTALL: Install = Install {
        namespace: "ksvc-system",
        service: "ksvc-webhook",
        secret: "ksvc-webhook-certs",
    };

    fn answer(code: u16, challenge: Option<&str>, body: Value) -> Proxied {
        Ok(ProxyAnswer {
            code,
            challenge: challenge.map(str::to_owned),
            body,
        })
    }

    fn status(code: u16, message: &str) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
               "message": message})
    }

    /// Only the status API's own answers pass; the API server's 404 and 503 (a Service that is
    /// not there, a server that is stopped) and another server's answers fail, each its way.
    #[test]
    fn only_an_answer_of_the_status_api_passes() {
        let realm = Some("Bearer realm=\"ksvc-webhook\"");
        let cases = [
            (
                answer(200, None, json!([{"name": "a"}])),
                true,
                "answers (1 app)",
            ),
            (
                answer(401, realm, json!({"error": "x"})),
                true,
                "answers (401",
            ),
            (
                answer(401, None, json!({"error": "x"})),
                false,
                "not as the status API",
            ),
            (
                answer(403, None, json!({"error": "forbidden: x"})),
                true,
                "answers (403)",
            ),
            (
                answer(503, None, json!({"error": "not synced"})),
                false,
                "answers 503: not synced",
            ),
            (
                answer(
                    404,
                    None,
                    status(404, "services \"ksvc-webhook\" not found"),
                ),
                false,
                "Service ksvc-system/ksvc-webhook does not exist (the API server answers 404",
            ),
            (
                answer(503, None, status(503, "no endpoints available")),
                false,
                "no pod of Service ksvc-system/ksvc-webhook answers",
            ),
            (
                answer(404, None, json!("404 page not found")),
                false,
                "not as the status API",
            ),
            (Err("timed out".to_owned()), false, "gives no answer"),
        ];
        for (answer, ok, needle) in cases {
            let outcome = status_api(&answer, &INSTALL);
            assert_eq!(outcome.ok, ok, "{answer:?}: {outcome:?}");
            assert!(outcome.message.contains(needle), "{needle}: {outcome:?}");
            assert_eq!(outcome.hint.is_some(), !ok);
        }
    }

    #[test]
    fn admission_passes_when_it_mutates_and_refuses() {
        let mut admitted = probe("default");
        admitted["metadata"]["name"] = "probe-x".into();
        admitted["metadata"]["annotations"] = json!({keys::ANNOTATION_SPEC_SHA: "abc"});
        admitted["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": keys::ENV_INTERNAL_APP_ENDPOINT_PATTERN, "value": "p"}]);
        let refused = DryRun::Refused {
            code: 400,
            message: "denied".into(),
        };
        let check =
            |valid: &DryRun, invalid: &DryRun| admission(valid, invalid, &INSTALL, "default");
        let good = check(&DryRun::Admitted(admitted.clone()), &refused);
        assert!(good.ok, "{good:?}");
        assert!(
            good.message
                .contains("name probe-x, flyte.org/spec-sha abc"),
            "{good:?}"
        );
        let unnamed = DryRun::Refused {
            code: 422,
            message: "Service.serving.knative.dev \"\" is invalid: metadata.name: Required \
                      value: name or generateName is required"
                .into(),
        };
        let cases = [
            (unnamed, refused.clone(), "the webhook was not called"),
            (
                DryRun::Admitted(probe("default")),
                refused.clone(),
                "the webhook was not called",
            ),
            (
                refused.clone(),
                refused.clone(),
                "admission refuses a valid KService",
            ),
            (
                DryRun::Refused {
                    code: 500,
                    message: "failed calling webhook \"x\": connection refused".into(),
                },
                refused.clone(),
                "cannot call the webhook",
            ),
            (
                DryRun::Admitted(admitted.clone()),
                DryRun::Admitted(admitted),
                "admits an invalid",
            ),
            (
                DryRun::Failed("forbidden".into()),
                refused,
                "cannot send a server dry run",
            ),
        ];
        for (valid, invalid, needle) in cases {
            let outcome = check(&valid, &invalid);
            assert!(
                !outcome.ok && outcome.message.contains(needle),
                "{needle}: {outcome:?}"
            );
        }
    }
}
