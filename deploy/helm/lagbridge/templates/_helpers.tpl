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

{{/* The Secret holding the quota protocol's tokens. */}}
{{- define "lagbridge.tokensSecret" -}}
{{- default (printf "%s-tokens" (include "lagbridge.fullname" .)) .Values.auth.secretName -}}
{{- end -}}

{{/* Whether the chart mounts the tokens Secret. */}}
{{- define "lagbridge.tokens" -}}
{{- if eq .Values.auth.mode "tokens" -}}true{{- end -}}
{{- end -}}

{{/* The config file: the user's config, with quota.auth from auth (unless
config sets quota.auth itself) and tls from tls; listen belongs to the chart. */}}
{{- define "lagbridge.config" -}}
{{- if hasKey .Values.config "listen" -}}
{{- fail "config.listen is set by the chart from service.port; remove it from config" -}}
{{- end -}}
{{- if not (has .Values.auth.mode (list "tokens" "none")) -}}
{{- fail (printf "auth.mode is %q: tokens (the producers need the tokens of the Secret) or none (anyone who reaches the Service may report demand and read grants)" .Values.auth.mode) -}}
{{- end -}}
{{- if and .Values.tls.secretName (eq .Values.tls.clientAuth "require") -}}
{{- fail "tls.clientAuth: require refuses the kubelet's probes, which present no client certificate; use verifyIfGiven" -}}
{{- end -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $quota := dict -}}
{{- if hasKey $cfg "quota" -}}{{- $quota = get $cfg "quota" -}}{{- end -}}
{{- if not (hasKey $quota "auth") -}}
{{- if eq .Values.auth.mode "none" -}}
{{- $_ := set $quota "auth" (dict "mode" "none") -}}
{{- else -}}
{{- $token := dict "tokenFile" "/etc/lagbridge/tokens/producer-token" "producers" .Values.auth.producers -}}
{{- $pattern := false -}}
{{- range .Values.auth.producers -}}{{- if hasSuffix "*" . -}}{{- $pattern = true -}}{{- end -}}{{- end -}}
{{- if and $pattern .Values.auth.maxIds -}}
{{- $_ := set $token "maxIds" .Values.auth.maxIds -}}
{{- end -}}
{{- $auth := dict "tokens" (list $token) "adminTokensFile" "/etc/lagbridge/tokens/admin-tokens" -}}
{{- if .Values.auth.readTokens -}}
{{- $_ := set $auth "readTokensFile" "/etc/lagbridge/tokens/read-tokens" -}}
{{- end -}}
{{- $_ := set $quota "auth" $auth -}}
{{- end -}}
{{- $_ := set $cfg "quota" $quota -}}
{{- end -}}
{{- if .Values.tls.secretName -}}
{{- if hasKey $cfg "tls" -}}
{{- fail "config.tls is set by the chart from tls.secretName; remove it from config" -}}
{{- end -}}
{{- $tls := dict "certFile" "/etc/lagbridge/tls/tls.crt" "keyFile" "/etc/lagbridge/tls/tls.key" -}}
{{- if .Values.tls.clientAuth -}}
{{- $_ := set $tls "clientCAFile" "/etc/lagbridge/tls/ca.crt" -}}
{{- $_ := set $tls "clientAuth" .Values.tls.clientAuth -}}
{{- end -}}
{{- $_ := set $cfg "tls" $tls -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* A probe from values, over HTTPS when the daemon serves TLS. */}}
{{- define "lagbridge.probe" -}}
{{- $p := deepCopy .probe -}}
{{- if and .tls (hasKey $p "httpGet") -}}
{{- $_ := set $p.httpGet "scheme" "HTTPS" -}}
{{- end -}}
{{- toYaml $p -}}
{{- end -}}
