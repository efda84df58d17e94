{{/*
The labels of every object: the two the kustomize manifests carry, then Helm's standard ones
(tests/chart.rs strips exactly these four when it compares the chart with manifests/).
*/}}
{{- define "ksvc-webhook.labels" -}}
app.kubernetes.io/name: ksvc-webhook
app.kubernetes.io/part-of: ksvc-webhook
{{ include "ksvc-webhook.helmLabels" . }}
{{- end }}

{{/* The controller part's labels: its own name, so the two Deployments never select each other's pods. */}}
{{- define "ksvc-webhook.controllerLabels" -}}
app.kubernetes.io/name: ksvc-webhook-controller
app.kubernetes.io/part-of: ksvc-webhook
{{ include "ksvc-webhook.helmLabels" . }}
{{- end }}

{{- define "ksvc-webhook.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The pods' image: repository@digest, or repository:tag (the appVersion when empty). */}}
{{- define "ksvc-webhook.image" -}}
{{- with .Values.image.digest -}}
{{ $.Values.image.repository }}@{{ . }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
{{- end }}

{{/* Whether the server manages its own certificates. */}}
{{- define "ksvc-webhook.selfManaged" -}}
{{- if eq .Values.certificates.mode "selfManaged" }}true{{ end }}
{{- end }}

{{/*
Both webhooks' namespaceSelector: never kube-system, knative-serving or the webhook's own
namespace (a broken webhook cannot block its own recovery), never an opted-out namespace.
*/}}
{{- define "ksvc-webhook.namespaceSelector" -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: ["kube-system", "knative-serving", {{ .Release.Namespace | quote }}]
  - key: {{ .Values.webhook.namespaceOptOut.key }}
    operator: NotIn
    values: [{{ .Values.webhook.namespaceOptOut.value | quote }}]
{{- with .Values.webhook.extraNamespaceSelectorTerms }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The serving Certificate's name, which cainjector reads the CA from. */}}
{{- define "ksvc-webhook.injectCaFrom" -}}
cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/ksvc-webhook-serving
{{- end }}
