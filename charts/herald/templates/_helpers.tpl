{{/* Chart name, "herald" unless nameOverride. */}}
{{- define "herald.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Prefix of every object name: fullnameOverride, else the release name when it
contains the chart name, else "<release>-<chart>".
*/}}
{{- define "herald.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "herald.namespace" -}}
{{- default .Release.Namespace .Values.namespace.name -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "herald.labels" -}}
app.kubernetes.io/name: {{ include "herald.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selector labels of a component: include "herald.selectorLabels" (list . "speaker") */}}
{{- define "herald.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "herald.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "herald.componentLabels" -}}
{{ include "herald.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "herald.controllerServiceAccount" -}}
{{- if .Values.controller.serviceAccount.create -}}
{{- default (printf "%s-controller" (include "herald.fullname" .)) .Values.controller.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.controller.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "herald.speakerServiceAccount" -}}
{{- if .Values.speaker.serviceAccount.create -}}
{{- default (printf "%s-speaker" (include "herald.fullname" .)) .Values.speaker.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.speaker.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "herald.webhookService" -}}{{ include "herald.fullname" . }}-webhook-service{{- end -}}
{{- define "herald.webhookConfiguration" -}}{{ include "herald.fullname" . }}-webhook-configuration{{- end -}}
{{- define "herald.webhookSecret" -}}{{ include "herald.fullname" . }}-webhook-cert{{- end -}}
{{- define "herald.memberlistSecret" -}}{{ include "herald.fullname" . }}-memberlist{{- end -}}
{{- define "herald.excludel2" -}}{{ include "herald.fullname" . }}-excludel2{{- end -}}

{{/* Image reference of a component: include "herald.image" (list . .Values.speaker.image) */}}
{{- define "herald.image" -}}
{{- $ := index . 0 -}}
{{- $img := index . 1 -}}
{{- printf "%s:%s" $img.repository (default $.Chart.AppVersion $img.tag) -}}
{{- end -}}

{{/* The webhook mode: enabled, or disabled when webhook.enabled is false. */}}
{{- define "herald.webhookMode" -}}
{{- if .Values.webhook.enabled -}}enabled{{- else -}}disabled{{- end -}}
{{- end -}}

{{/*
"true" when a values entry asks for nothing: null, "", an empty list, or a
map of such entries (false and 0 are values). templates/metallb-values.yaml.
*/}}
{{- define "herald.metallbValueEmpty" -}}
{{- if kindIs "map" . -}}
{{- $r := "true" -}}
{{- range $k, $v := . -}}
{{- if ne (include "herald.metallbValueEmpty" $v) "true" -}}
{{- $r = "false" -}}
{{- end -}}
{{- end -}}
{{- $r -}}
{{- else if or (kindIs "bool" .) (kindIs "float64" .) (kindIs "int" .) (kindIs "int64" .) -}}
false
{{- else if empty . -}}
true
{{- else -}}
false
{{- end -}}
{{- end -}}

{{/*
The TLS flags of both components' metrics and webhook servers. Cipher
suites configure TLS 1.2 only: with VersionTLS13 they are refused here, as
the binaries refuse them.
*/}}
{{- define "herald.tlsArgs" -}}
{{- $min := .Values.tls.minVersion | default "VersionTLS13" -}}
{{- if and .Values.tls.cipherSuites (eq $min "VersionTLS13") -}}
{{- fail "tls.cipherSuites apply to TLS 1.2 only (Go does not configure TLS 1.3 suites): set tls.minVersion: VersionTLS12 or remove tls.cipherSuites" -}}
{{- end -}}
- --tls-min-version={{ $min }}
{{- with .Values.tls.cipherSuites }}
- --tls-cipher-suites={{ . }}
{{- end }}
{{- with .Values.tls.curvePreferences | toString }}
- --tls-curve-preferences={{ . }}
{{- end }}
{{- end -}}
