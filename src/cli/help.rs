//! The text after each subcommand's `--help`: the environment variables it reads besides each
//! flag's own `KSVC_WEBHOOK_…` (shown beside the flag), and examples that work when pasted.
//!
//! Words only; `cli::tests` checks that every subcommand has both parts.

/// `mutate`.
pub const MUTATE: &str = "\
Environment:
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook mutate -f examples/managed-ksvc.yaml
  ksvc-webhook mutate -f examples/ -f extra.yaml        # every *.yaml, *.yml, *.json; -R recurses
  kubectl get ksvc hello -o yaml | ksvc-webhook mutate -f - --operation update --old stored.yaml";

/// `review`.
pub const REVIEW: &str = "\
Environment:
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook review -f examples/managed-review.json
  ksvc-webhook review -f review.yaml --sidecars examples/sidecars.yaml";

/// `uninject`.
pub const UNINJECT: &str = "\
Environment:
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook mutate -f examples/managed-ksvc.yaml | ksvc-webhook uninject -f -";

/// `name`.
pub const NAME: &str = "\
Environment:
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook name --project proj --domain dev --name MyApp     # myapp-proj-dev";

/// `sha`.
pub const SHA: &str = "\
Environment:
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook sha -f examples/managed-ksvc.yaml                 # flyte/myapp-proj-dev  <sha>
  ksvc-webhook sha -R -f examples/ -n team-a";

/// `app` and each of its subcommands.
pub const APP: &str = "\
Environment:
  KUBECONFIG   kubeconfig files (':'-separated) when --kubeconfig is not given
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook app list -A
  ksvc-webhook app stop myapp-proj-dev -n flyte --wait";

/// `app stop`.
pub const APP_STOP: &str = "\
Environment:
  KUBECONFIG   kubeconfig files (':'-separated) when --kubeconfig is not given
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook app stop myapp-proj-dev -n flyte --wait --timeout 2m
  ksvc-webhook app stop myapp-proj-dev -n flyte --dry-run=server";

/// `app start`.
pub const APP_START: &str = "\
Environment:
  KUBECONFIG   kubeconfig files (':'-separated) when --kubeconfig is not given
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook app start myapp-proj-dev -n flyte --wait";

/// `app status`.
pub const APP_STATUS: &str = "\
Environment:
  KUBECONFIG   kubeconfig files (':'-separated) when --kubeconfig is not given
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook app status myapp-proj-dev -n flyte -w
  ksvc-webhook app status myapp-proj-dev -n flyte --until ACTIVE --timeout 1m30s
  ksvc-webhook app status myapp-proj-dev -n flyte -o jsonpath='{.status.phase}'";

/// `app list`.
pub const APP_LIST: &str = "\
Environment:
  KUBECONFIG   kubeconfig files (':'-separated) when --kubeconfig is not given
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook app list -n flyte -l flyte.org/project=proj
  ksvc-webhook app list -A -o wide --context staging
  ksvc-webhook app list -o jsonpath='{range .items[*]}{.name}{\"\\t\"}{.status.phase}{\"\\n\"}{end}'";

/// `app update`.
pub const APP_UPDATE: &str = "\
Environment:
  KUBECONFIG   kubeconfig files (':'-separated) when --kubeconfig is not given
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook app update myapp-proj-dev -n flyte --image registry.example/app:2 --wait
  ksvc-webhook app update myapp-proj-dev -n flyte --min-scale 1 --dry-run=server";

/// `serve`.
pub const SERVE: &str = "\
Environment:
  RUST_LOG     log filter, e.g. info (the default) or ksvc_webhook=debug
  KUBECONFIG   kubeconfig files (':'-separated) outside a cluster, when --kubeconfig is not given
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook serve --listen 127.0.0.1:8443 --tls-dir certs --status-auth=false";

/// `certs`.
pub const CERTS: &str = "\
Environment:
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook certs --service ksvc-webhook --namespace ksvc-system --out certs --days 90";

/// `completion`.
pub const COMPLETION: &str = "\
Environment:
  NO_COLOR     any value: no colour in help and errors

Examples:
  source <(ksvc-webhook completion bash)
  ksvc-webhook completion zsh > \"${fpath[1]}/_ksvc-webhook\"
  ksvc-webhook completion fish > ~/.config/fish/completions/ksvc-webhook.fish";

/// `check`.
pub const CHECK: &str = "\
Environment:
  KUBECONFIG   kubeconfig files (':'-separated) when --kubeconfig is not given
  NO_COLOR     any value: no colour in help and errors

Examples:
  ksvc-webhook check
  ksvc-webhook check --wait --timeout 2m -o json
  ksvc-webhook check --pre                  # before installing";
