{{/* Name of the chart, overridable. */}}
{{- define "lagbridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release-chart, or the release name when it contains the chart name. */}}
{{- define "lagbridge.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "lagbridge.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "lagbridge.labels" -}}
helm.sh/chart: {{ include "lagbridge.chart" . }}
{{ include "lagbridge.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Labels the Service and the ServiceMonitor select on. */}}
{{- define "lagbridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lagbridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lagbridge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "lagbridge.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The config file: the user's config; listen belongs to the chart. */}}
{{- define "lagbridge.config" -}}
{{- if hasKey .Values.config "listen" -}}
{{- fail "config.listen is set by the chart from service.port; remove it from config" -}}
{{- end -}}
{{- toYaml .Values.config -}}
{{- end -}}
