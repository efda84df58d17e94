//! The wave's decisions, step by step, on apps described as data.

use std::time::Duration;

use super::*;
use crate::admission::drift::Finding;
use crate::watch::view::KService;

fn key(name: &str) -> AppKey {
    key_in("apps", name)
}

fn key_in(namespace: &str, name: &str) -> AppKey {
    AppKey {
        namespace: namespace.into(),
        name: name.into(),
    }
}

fn stored(image: &str) -> Stored {
    let ksvc: KService = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "x", "namespace": "apps"},
        "spec": {"template": {"spec": {"containers": [{"image": image}]}}}
    }))
    .unwrap();
    ksvc.stored
}

fn drift(reasons: &[Reason]) -> Drift {
    Drift {
        findings: reasons
            .iter()
            .map(|r| Finding {
                reason: *r,
                detail: String::new(),
            })
            .collect(),
        new_revision: true,
    }
}

/// One app as data: its name, drift and what the wave reads of it.
struct Fixture {
    key: AppKey,
    drift: Drift,
    stored: Stored,
    stopped: bool,
    deleting: bool,
    opted_out: bool,
    namespace_enabled: bool,
    readmitted: bool,
    generation: i64,
    settled: bool,
    failed: Option<String>,
}

fn app(name: &str, reasons: &[Reason]) -> Fixture {
    Fixture {
        key: key(name),
        drift: drift(reasons),
        stored: stored("app:1"),
        stopped: false,
        deleting: false,
        opted_out: false,
        namespace_enabled: false,
        readmitted: false,
        generation: 2,
        settled: true,
        failed: None,
    }
}

fn view(apps: &[Fixture]) -> Vec<App<'_>> {
    apps.iter()
        .map(|a| App {
            key: &a.key,
            drift: &a.drift,
            stored: &a.stored,
            stopped: a.stopped,
            deleting: a.deleting,
            opted_out: a.opted_out,
            namespace_enabled: a.namespace_enabled,
            readmitted: a.readmitted,
            generation: a.generation,
            settled: a.settled,
            failed: a.failed.clone(),
        })
        .collect()
}

fn all() -> Settings {
    Settings {
        mode: Mode::All,
        interval: Duration::from_secs(10),
        ..Settings::default()
    }
}

const S: fn(u64) -> Duration = Duration::from_secs;

/// A write that changed the template, stored as generation 2.
const NEW_REVISION: Written = Written::Yes {
    new_revision: true,
    generation: 2,
};

#[test]
fn only_apps_it_may_fix_are_started() {
    use Reason::*;
    let mut stopped = app("stopped", &[MissingSpecSha]);
    stopped.stopped = true;
    let mut deleting = app("deleting", &[MissingSpecSha]);
    deleting.deleting = true;
    let mut never = app("never", &[MissingSpecSha]);
    never.opted_out = true;
    let cases: Vec<(&str, Fixture, Settings)> = vec![
        ("in step", app("a", &[]), all()),
        ("refused today", app("a", &[WouldReject]), all()),
        ("excluded", app("a", &[Excluded]), all()),
        (
            "revision-named",
            app("a", &[StaleSidecars, BlockedRevisionName]),
            all(),
        ),
        ("stopped", stopped, all()),
        ("deleting", deleting, all()),
        ("opted out", never, all()),
        (
            "off",
            app("a", &[MissingSpecSha]),
            Settings {
                mode: Mode::Off,
                ..all()
            },
        ),
        (
            "labelled, namespace not",
            app("a", &[MissingSpecSha]),
            Settings {
                mode: Mode::Labelled,
                ..all()
            },
        ),
        (
            "a reason not acted on",
            app("a", &[MissingSpecSha]),
            Settings {
                reasons: [StaleSidecars].into(),
                ..all()
            },
        ),
    ];
    for (name, fixture, settings) in cases {
        let fixtures = [fixture];
        let steps = Wave::default().step(&settings, view(&fixtures), S(0));
        assert_eq!(steps, [], "{name}");
    }
    let mut labelled = app("a", &[MissingSpecSha, Other]);
    labelled.namespace_enabled = true;
    let settings = Settings {
        mode: Mode::Labelled,
        ..all()
    };
    let steps = Wave::default().step(&settings, view(&[labelled]), S(0));
    assert_eq!(steps, [Step::Start(key("a"))]);
}

#[test]
fn starts_wait_for_room_and_the_interval() {
    let mut apps = vec![
        app("a", &[Reason::StaleSidecars]),
        app("b", &[Reason::StaleSidecars]),
        app("c", &[Reason::MissingSpecSha]),
    ];
    let settings = all();
    let mut wave = Wave::default();
    assert_eq!(
        wave.step(&settings, view(&apps), S(0)),
        [Step::Start(key("a"))]
    );
    assert_eq!(wave.step(&settings, view(&apps), S(1)), [], "still writing");
    wave.written(&key("a"), stored("app:1"), &NEW_REVISION, S(1));
    apps[0].drift = drift(&[]);
    apps[0].readmitted = true;
    apps[0].settled = false;
    assert_eq!(
        wave.step(&settings, view(&apps), S(20)),
        [],
        "a is unsettled"
    );
    assert_eq!(wave.in_flight(), 1);
    apps[0].settled = true;
    assert_eq!(
        wave.step(&settings, view(&apps), S(21)),
        [Step::Converged(key("a")), Step::Start(key("b"))]
    );
    // A metadata-only convergence has nothing to wait for; the interval still holds.
    wave.written(
        &key("b"),
        stored("app:1"),
        &Written::Yes {
            new_revision: false,
            generation: 1,
        },
        S(21),
    );
    apps[1].drift = drift(&[]);
    assert_eq!(wave.step(&settings, view(&apps), S(25)), []);
    assert_eq!(
        wave.step(&settings, view(&apps), S(31)),
        [Step::Start(key("c"))]
    );
}

/// Write the app the wave `started` at `at`, and let its new Revision fail: the wave's steps
/// a second later.
fn write_and_fail(
    wave: &mut Wave,
    settings: &Settings,
    apps: &mut [Fixture],
    started: &AppKey,
    at: u64,
) -> Vec<Step> {
    wave.written(started, stored("app:1"), &NEW_REVISION, S(at));
    // Written through admission: converged, but its new Revision fails.
    let app = apps.iter_mut().find(|a| a.key == *started).unwrap();
    app.drift = drift(&[]);
    app.readmitted = true;
    app.settled = false;
    app.failed = Some("RevisionFailed: image pull".into());
    let seen = wave.step(settings, view(apps), S(at + 1));
    assert!(
        matches!(&seen[0], Step::Failed { key: k, timed_out: false, .. } if k == started),
        "{seen:?}"
    );
    seen
}

#[test]
fn failures_in_a_row_across_namespaces_pause_the_wave_until_the_policy_changes() {
    let mut apps: Vec<Fixture> = ["a", "b", "c", "d"]
        .iter()
        .map(|ns| Fixture {
            key: key_in(ns, "app"),
            ..app("app", &[Reason::StaleSidecars])
        })
        .collect();
    let settings = Settings {
        interval: Duration::ZERO,
        ..all()
    };
    let mut wave = Wave::default();
    let mut seen = wave.step(&settings, view(&apps), S(0));
    for (i, ns) in ["a", "b", "c"].iter().enumerate() {
        let started = key_in(ns, "app");
        assert_eq!(seen.last(), Some(&Step::Start(started.clone())), "{seen:?}");
        seen = write_and_fail(&mut wave, &settings, &mut apps, &started, i as u64);
    }
    assert_eq!(seen.last(), Some(&Step::Paused(3)), "{seen:?}");
    assert!(wave.paused());
    assert_eq!(wave.step(&settings, view(&apps), S(100)), [], "d waits");
    wave.policy_changed();
    assert_eq!(
        wave.step(&settings, view(&apps), S(101)),
        [Step::Start(key_in("d", "app"))]
    );
}

#[test]
fn one_namespace_failing_pauses_only_that_namespace() {
    let mut apps: Vec<Fixture> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|n| Fixture {
            key: key_in("tenant", n),
            ..app(n, &[Reason::StaleSidecars])
        })
        .collect();
    apps.push(Fixture {
        key: key_in("other", "x"),
        ..app("x", &[Reason::StaleSidecars])
    });
    let settings = Settings {
        interval: Duration::ZERO,
        ..all()
    };
    let mut wave = Wave::default();
    let mut seen = wave.step(&settings, view(&apps), S(0));
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        let started = key_in("tenant", name);
        assert_eq!(seen.last(), Some(&Step::Start(started.clone())), "{seen:?}");
        seen = write_and_fail(&mut wave, &settings, &mut apps, &started, i as u64);
    }
    let paused = Step::NamespacePaused {
        namespace: "tenant".into(),
        failures: 3,
    };
    assert!(seen.contains(&paused), "{seen:?}");
    assert!(!wave.paused(), "the other namespaces go on");
    assert!(!seen.contains(&Step::Paused(3)), "{seen:?}");
    // The tenant's other apps wait; the other namespace's app starts.
    assert_eq!(
        seen.last(),
        Some(&Step::Start(key_in("other", "x"))),
        "{seen:?}"
    );
    let done = Written::Yes {
        new_revision: false,
        generation: 2,
    };
    wave.written(&key_in("other", "x"), stored("app:1"), &done, S(9));
    apps[5].drift = drift(&[]);
    assert_eq!(wave.step(&settings, view(&apps), S(10)), [], "said once");
    wave.policy_changed();
    assert_eq!(
        wave.step(&settings, view(&apps), S(11)),
        [Step::Start(key_in("tenant", "d"))]
    );
}

#[test]
fn a_revision_not_ready_in_time_is_a_failure() {
    let mut apps = vec![app("a", &[Reason::StaleSidecars])];
    let settings = all();
    let mut wave = Wave::default();
    wave.step(&settings, view(&apps), S(0));
    wave.written(&key("a"), stored("app:1"), &NEW_REVISION, S(0));
    apps[0].drift = drift(&[]);
    apps[0].readmitted = true;
    apps[0].settled = false;
    assert_eq!(wave.step(&settings, view(&apps), S(300)), []);
    let steps = wave.step(&settings, view(&apps), S(301));
    assert!(
        matches!(&steps[..], [Step::Failed { timed_out: true, why, .. }] if why.contains("300s")),
        "{steps:?}"
    );
    // Still unsettled, but failed once: neither in flight nor failed again.
    assert_eq!(wave.step(&settings, view(&apps), S(302)), []);
    assert_eq!(wave.in_flight(), 0);
    assert_eq!(wave.step(&settings, view(&apps), S(700)), []);
    assert_eq!(wave.failures, 1);
}

#[test]
fn unfixable_and_refused_apps_wait_for_a_change_and_refusals_count() {
    let mut apps = vec![app("a", &[Reason::Other])];
    let settings = Settings {
        interval: Duration::ZERO,
        ..all()
    };
    let mut wave = Wave::default();
    wave.step(&settings, view(&apps), S(0));
    wave.written(&key("a"), stored("app:1"), &Written::Unfixable, S(0));
    assert_eq!(wave.state_of(&key("a")), Some("unfixable"));
    assert_eq!(wave.step(&settings, view(&apps), S(1)), [], "not again");
    apps[0].stored = stored("app:2");
    assert_eq!(
        wave.step(&settings, view(&apps), S(2)),
        [Step::Start(key("a"))],
        "the app changed"
    );
    wave.written(&key("a"), stored("app:2"), &Written::Skipped, S(2));
    assert_eq!(
        wave.step(&settings, view(&apps), S(3)),
        [Step::Start(key("a"))],
        "nothing was written: tried again"
    );
    wave.written(&key("a"), stored("app:2"), &Written::Refused, S(3));
    assert_eq!(wave.failures, 1);
    assert_eq!(wave.state_of(&key("a")), Some("refused"));
    assert_eq!(
        wave.step(&settings, view(&apps), S(4)),
        [],
        "a refused app is not tried (nor counted) again until it changes"
    );
    assert_eq!(wave.failures, 1);
    wave.policy_changed();
    assert_eq!(
        wave.step(&settings, view(&apps), S(5)),
        [Step::Start(key("a"))],
        "the policy changed"
    );
}

#[test]
fn an_app_another_leader_wrote_counts_until_it_settles() {
    let mut apps = vec![app("a", &[]), app("b", &[Reason::MissingEndpointEnv])];
    apps[0].readmitted = true;
    apps[0].settled = false;
    let settings = all();
    let mut wave = Wave::default();
    assert_eq!(wave.step(&settings, view(&apps), S(0)), []);
    assert_eq!(wave.state_of(&key("a")), Some("waiting-for-ready"));
    apps[0].settled = true;
    assert_eq!(
        wave.step(&settings, view(&apps), S(1)),
        [Step::Converged(key("a")), Step::Start(key("b"))]
    );
    wave.reset();
    assert_eq!(wave.in_flight(), 0, "a new leader starts from the cluster");
}

#[test]
fn a_written_app_settles_only_once_the_cache_shows_the_write() {
    let mut apps = vec![app("a", &[Reason::StaleSidecars])];
    let settings = all();
    let mut wave = Wave::default();
    wave.step(&settings, view(&apps), S(0));
    wave.written(
        &key("a"),
        stored("app:1"),
        &Written::Yes {
            new_revision: true,
            generation: 3,
        },
        S(0),
    );
    // The cache still holds generation 2, settled as it was before the write.
    assert_eq!(wave.step(&settings, view(&apps), S(1)), []);
    apps[0].failed = Some("an old failure".into());
    apps[0].settled = false;
    assert_eq!(
        wave.step(&settings, view(&apps), S(2)),
        [],
        "not its failure"
    );
    apps[0].generation = 3;
    apps[0].failed = None;
    apps[0].settled = true;
    assert_eq!(
        wave.step(&settings, view(&apps), S(3)),
        [Step::Converged(key("a"))]
    );
}

#[test]
fn an_unreachable_api_server_holds_starts_and_clocks_until_a_probe_answers() {
    let mut apps = vec![
        app("a", &[Reason::StaleSidecars]),
        app("b", &[Reason::StaleSidecars]),
        app("c", &[Reason::StaleSidecars]),
    ];
    let settings = Settings {
        max_in_flight: 2,
        ..all()
    };
    let mut wave = Wave::default();
    assert_eq!(
        wave.step(&settings, view(&apps), S(0)),
        [Step::Start(key("a"))]
    );
    wave.written(&key("a"), stored("app:1"), &NEW_REVISION, S(0));
    apps[0].drift = drift(&[]);
    apps[0].readmitted = true;
    apps[0].settled = false;
    // A watch fails 5 s into a's rollout: b is due at 10 s, but nothing starts; the wave asks
    // whether the API server answers, once an interval.
    assert!(wave.unreachable(S(5)));
    assert!(!wave.unreachable(S(6)), "one outage");
    assert_eq!(wave.step(&settings, view(&apps), S(10)), [Step::Probe]);
    assert_eq!(wave.step(&settings, view(&apps), S(15)), [], "probing");
    assert!(!wave.probed(false, S(16)));
    assert_eq!(wave.step(&settings, view(&apps), S(19)), [], "an interval");
    // Long past a's ready timeout: the cache cannot show it settle, so it does not count.
    assert_eq!(wave.step(&settings, view(&apps), S(400)), [Step::Probe]);
    assert_eq!(wave.state_of(&key("a")), Some("waiting-for-ready"));
    assert_eq!(wave.in_flight(), 1);
    assert!(wave.probed(true, S(401)), "the outage ends");
    assert!(!wave.unreachable_now());
    assert_eq!(
        wave.step(&settings, view(&apps), S(405)),
        [],
        "an interval after the answer"
    );
    assert_eq!(
        wave.step(&settings, view(&apps), S(411)),
        [Step::Start(key("b"))]
    );
    // a's clock goes on where it stopped: 5 s counted before the outage.
    assert_eq!(wave.step(&settings, view(&apps), S(696)), []);
    let steps = wave.step(&settings, view(&apps), S(697));
    assert!(
        matches!(&steps[..], [Step::Failed { key: k, timed_out: true, .. }, Step::Start(c)] if *k == key("a") && *c == key("c")),
        "{steps:?}"
    );
    // A write that cannot reach the API server holds the wave too, and b is not retried
    // until it answers.
    wave.written(&key("b"), stored("app:1"), &Written::Unreachable, S(698));
    assert!(wave.unreachable_now());
    assert_eq!(wave.step(&settings, view(&apps), S(710)), [Step::Probe]);
    wave.reset();
    assert!(wave.unreachable_now(), "an outage outlasts leadership");
    assert_eq!(wave.step(&settings, view(&apps), S(711)), [Step::Probe]);
    assert!(wave.probed(true, S(712)));
    assert_eq!(
        wave.step(&settings, view(&apps), S(722)),
        [Step::Start(key("b"))]
    );
}
