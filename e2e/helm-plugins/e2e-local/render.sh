#!/bin/sh
# The e2e-local post-renderer: the rendered chart on stdin, the same objects out with the
# webhook Service of type ExternalName (localhost) and the webhook configurations' port set to $1.
set -eu
port=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/rendered.yaml"
cat > "$dir/kustomization.yaml" <<YAML
resources: [rendered.yaml]
patches:
  - target: {version: v1, kind: Service, name: ksvc-webhook}
    patch: |-
      apiVersion: v1
      kind: Service
      metadata:
        name: ksvc-webhook
      spec:
        type: ExternalName
        externalName: localhost
        selector: null
        ports: null
  - target: {group: admissionregistration.k8s.io, kind: MutatingWebhookConfiguration}
    patch: '[{"op": "replace", "path": "/webhooks/0/clientConfig/service/port", "value": $port}]'
  - target: {group: admissionregistration.k8s.io, kind: ValidatingWebhookConfiguration}
    patch: '[{"op": "replace", "path": "/webhooks/0/clientConfig/service/port", "value": $port}]'
YAML
"${KUBECTL:-kubectl}" kustomize "$dir"
