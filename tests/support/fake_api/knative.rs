//! Knative's Service controller, as far as re-admission sees it: a Service whose spec changed
//! (`metadata.generation` above `status.observedGeneration`) gets a new Revision that becomes
//! Ready after a delay, or fails at once when any of its images names `broken`. Runs beside the
//! fake until the handle is dropped, and remembers when each Revision became Ready.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::FakeApi;

/// The running controller; dropping it stops it.
pub struct Knative {
    task: tokio::task::JoinHandle<()>,
    /// When each Revision (by name) became Ready.
    pub ready: Arc<Mutex<BTreeMap<String, Instant>>>,
}

impl Drop for Knative {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeApi {
    /// Run Knative's Service controller: new Revisions are Ready `after` they are created.
    pub fn knative(&self, after: Duration) -> Knative {
        let fake = self.clone();
        let ready = Arc::new(Mutex::new(BTreeMap::new()));
        let seen = ready.clone();
        let task = tokio::spawn(async move {
            let mut created: BTreeMap<String, Instant> = BTreeMap::new();
            loop {
                for service in fake.all("services") {
                    fake.reconcile(&service, after, &mut created, &seen);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        Knative { task, ready }
    }

    fn reconcile(
        &self,
        service: &Value,
        after: Duration,
        created: &mut BTreeMap<String, Instant>,
        ready: &Mutex<BTreeMap<String, Instant>>,
    ) {
        let meta = &service["metadata"];
        let generation = meta["generation"].as_i64().unwrap_or(1);
        if service["status"]["observedGeneration"].as_i64() >= Some(generation) {
            return;
        }
        let (ns, name) = (
            meta["namespace"].as_str().unwrap_or_default(),
            meta["name"].as_str().unwrap_or_default(),
        );
        let revision = format!("{name}-{generation:05}");
        let started = *created.entry(revision.clone()).or_insert_with(Instant::now);
        let images = service["spec"]["template"]["spec"]["containers"].to_string();
        let broken = images.contains("broken");
        if !broken && started.elapsed() < after {
            return;
        }
        let status = match broken {
            true => json!({
                "observedGeneration": generation,
                "latestCreatedRevisionName": revision,
                "latestReadyRevisionName": service["status"]["latestReadyRevisionName"],
                "conditions": [{"type": "Ready", "status": "False", "reason": "RevisionFailed",
                                "message": format!("Revision \"{revision}\" failed: the image cannot be pulled")}]
            }),
            false => json!({
                "observedGeneration": generation,
                "latestCreatedRevisionName": revision,
                "latestReadyRevisionName": revision,
                "conditions": [{"type": "Ready", "status": "True"}]
            }),
        };
        if self.edit("services", ns, name, |s| s["status"] = status) && !broken {
            ready.lock().unwrap().insert(revision, Instant::now());
        }
    }
}
