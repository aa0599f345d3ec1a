{{/*
Labels of an object: the kustomize base's (app.kubernetes.io/name when a name is given, part-of dl2), then Helm's.
Selectors and pod templates use only the base's, so that an upgrade of the chart never changes them.
  include "dl2.labels" (list $ "dl2-scheduler")
*/}}
{{- define "dl2.labels" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- if $name }}
app.kubernetes.io/name: {{ $name }}
{{- end }}
app.kubernetes.io/part-of: dl2
{{ include "dl2.helmLabels" $root }}
{{- end }}

{{/* The labels Helm's charts carry: which chart, release and version made the object. */}}
{{- define "dl2.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The labels of a pod template: the base's (the Deployment's selector is their name label). */}}
{{- define "dl2.podLabels" -}}
app.kubernetes.io/name: {{ . }}
app.kubernetes.io/part-of: dl2
{{- end }}

{{/*
An image reference: repository@digest when a digest is given, else repository:tag (the default tag when empty).
  include "dl2.image" (list .Values.image .Chart.AppVersion)
*/}}
{{- define "dl2.image" -}}
{{- $image := index . 0 -}}
{{- if $image.digest -}}
{{ $image.repository }}@{{ $image.digest }}
{{- else -}}
{{ $image.repository }}:{{ $image.tag | default (index . 1) }}
{{- end -}}
{{- end }}

{{/* The namespace everything namespaced goes in. */}}
{{- define "dl2.namespace" -}}
{{ .Values.namespace.name }}
{{- end }}

{{/* A ServiceAccount as a binding's subject: include "dl2.subject" (list $ .Values.serviceAccounts.controller) */}}
{{- define "dl2.subject" -}}
{kind: ServiceAccount, name: {{ index . 1 }}, namespace: {{ include "dl2.namespace" (index . 0) }}}
{{- end }}

{{/*
A NetworkPolicy rule, or nothing when its peer list is empty: a rule with no peers would admit every address.
  include "dl2.ingressRule" (list .Values.networkPolicy.metricsFrom 8080)   from the peers to one TCP port
  include "dl2.egressRule" .Values.networkPolicy.egress.apiServer           {to, ports}: to the peers' TCP ports
  include "dl2.dnsRule" .Values.networkPolicy.egress.dns                     {to}: to the peers' port 53
*/}}
{{- define "dl2.ingressRule" -}}
{{- $from := index . 0 -}}
{{- if $from -}}
- from:
    {{- toYaml $from | nindent 4 }}
  ports:
    - {port: {{ index . 1 }}, protocol: TCP}
{{- end }}
{{- end }}

{{- define "dl2.egressRule" -}}
{{- if .to -}}
- to:
    {{- toYaml .to | nindent 4 }}
  ports:
    {{- range .ports }}
    - {port: {{ . }}, protocol: TCP}
    {{- end }}
{{- end }}
{{- end }}

{{- define "dl2.dnsRule" -}}
{{- if .to -}}
- to:
    {{- toYaml .to | nindent 4 }}
  ports:
    - {port: 53, protocol: UDP}
    - {port: 53, protocol: TCP}
{{- end }}
{{- end }}
