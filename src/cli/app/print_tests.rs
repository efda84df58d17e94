use super::*;
use crate::watch::status::AppStatus;

fn record(name: &str, phase: Phase, message: &str, replicas: Option<i32>) -> AppRecord {
    AppRecord {
        namespace: "apps".into(),
        name: name.into(),
        project: Some("proj".into()),
        domain: Some("dev".into()),
        app_name: Some("hello".into()),
        status: AppStatus {
            phase,
            message: message.into(),
            last_transition_time: "2026-12-01T10:00:00Z".into(),
            replicas,
            url: Some(format!("http://{name}.apps.example.com")),
            substate: None,
        },
        drift: Default::default(),
    }
}

fn shown(record: AppRecord, age: Option<i64>) -> Shown {
    Shown {
        record,
        age: age.map(SignedDuration::from_secs),
    }
}

fn print(output: Output, namespaces: bool, apps: &[Shown]) -> String {
    Printer::new(output, namespaces).print(apps, true).unwrap()
}

#[test]
fn a_table_aligns_every_row_under_its_header() {
    let apps = [
        shown(
            record("hello-proj-dev", Phase::Active, "", Some(2)),
            Some(3 * 3600 + 5),
        ),
        shown(
            record("b", Phase::Failed, "RevisionFailed: image not found", None),
            None,
        ),
    ];
    assert_eq!(
        print(Output::Table, false, &apps),
        "NAME             PHASE    REPLICAS   URL                                      AGE\n\
         hello-proj-dev   ACTIVE   2          http://hello-proj-dev.apps.example.com   3h\n\
         b                FAILED   -          http://b.apps.example.com                -\n\
         \x20 RevisionFailed: image not found\n"
    );
}

#[test]
fn wide_and_all_namespaces_add_columns() {
    let apps = [shown(
        record("b", Phase::Failed, "RevisionFailed: x", None),
        Some(5),
    )];
    assert_eq!(
        print(Output::Wide, true, &apps),
        "NAMESPACE   NAME   PHASE    REPLICAS   URL                         AGE   APP              MESSAGE\n\
         apps        b      FAILED   -          http://b.apps.example.com   5s    proj/dev/hello   RevisionFailed: x\n"
    );
}

#[test]
fn a_watch_prints_its_header_once_and_keeps_the_columns() {
    let mut printer = Printer::new(Output::Table, false);
    let first = printer
        .print(
            &[shown(record("app", Phase::Active, "", Some(1)), None)],
            false,
        )
        .unwrap();
    let second = printer
        .print(
            &[shown(record("app", Phase::Stopped, "", None), None)],
            false,
        )
        .unwrap();
    assert_eq!(first.lines().count(), 2, "{first}");
    assert!(first.starts_with("NAME   PHASE"), "{first}");
    assert!(
        second.starts_with("app    STOPPED   -          "),
        "{second}"
    );
}

#[test]
fn json_has_the_keys_of_apps_without_drift_and_a_listing_is_a_list() {
    let apps = [shown(record("a", Phase::Active, "", Some(1)), None)];
    let one = Printer::new(Output::Json, false)
        .print(&apps, false)
        .unwrap();
    assert!(one.contains("\n  \"app_name\": \"hello\",\n"), "{one}");
    assert!(
        one.contains("\"last_transition_time\": \"2026-12-01T10:00:00Z\""),
        "{one}"
    );
    // The command line does not judge drift: no `drift: []` that reads as "in step".
    assert!(!one.contains("drift"), "{one}");
    let list: Value = serde_json::from_str(&print(Output::Json, false, &apps)).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"][0]["status"]["phase"], "ACTIVE");
    let yaml = print(Output::Yaml, false, &apps);
    assert!(
        yaml.starts_with("---\napiVersion: v1\nitems:\n- app_name: hello\n"),
        "{yaml}"
    );
    assert!(yaml.ends_with("\nkind: List\n"), "{yaml}");
}

#[test]
fn name_and_jsonpath_print_what_scripts_read() {
    let apps = [
        shown(record("a", Phase::Active, "", Some(1)), None),
        shown(record("b", Phase::Stopped, "", None), None),
    ];
    assert_eq!(
        print(Output::Name, false, &apps),
        "service.serving.knative.dev/a\nservice.serving.knative.dev/b\n"
    );
    let path = crate::cli::output::parse_any("jsonpath={.items[*].status.phase}").unwrap();
    assert_eq!(print(path, false, &apps), "ACTIVE STOPPED");
}

#[test]
fn output_formats_parse_and_an_unknown_one_lists_the_forms() {
    assert_eq!(crate::cli::output::parse_any("wide"), Ok(Output::Wide));
    assert_eq!(
        crate::cli::output::parse_any("xml").unwrap_err(),
        "unknown output format `xml`; use table, wide, name, json, yaml or jsonpath=TEMPLATE"
    );
}

#[test]
fn ages_read_as_kubectl_writes_them() {
    let cases = [
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (10_799, "179m"),
        (10_800, "3h"),
        (172_799, "47h"),
        (172_800, "2d"),
        (-5, "0s"),
    ];
    for (secs, want) in cases {
        assert_eq!(human_age(SignedDuration::from_secs(secs)), want, "{secs}s");
    }
}
