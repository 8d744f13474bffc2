{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "stream-dedupe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart unless the release name already contains the chart name. */}}
{{- define "stream-dedupe.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "stream-dedupe.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "stream-dedupe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "stream-dedupe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "stream-dedupe.labels" -}}
helm.sh/chart: {{ include "stream-dedupe.chart" . }}
{{ include "stream-dedupe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: stream-dedupe
{{- end }}

{{- define "stream-dedupe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "stream-dedupe.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "stream-dedupe.headlessName" -}}
{{- printf "%s-headless" (include "stream-dedupe.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "stream-dedupe.configName" -}}
{{- printf "%s-config" (include "stream-dedupe.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Input partitions as the worker sees them (its default is 4). */}}
{{- define "stream-dedupe.inputPartitions" -}}
{{- $p := .Values.config.input_partitions }}
{{- if or (kindIs "invalid" $p) (eq (toString $p) "") }}4{{ else }}{{ int64 $p }}{{ end }}
{{- end }}

{{/* Worker shutdown_timeout in seconds (its default is 30). */}}
{{- define "stream-dedupe.shutdownTimeout" -}}
{{- $t := .Values.config.shutdown_timeout }}
{{- if or (kindIs "invalid" $t) (eq (toString $t) "") }}30{{ else }}{{ float64 $t }}{{ end }}
{{- end }}

{{- define "stream-dedupe.saslEnabled" -}}
{{- if hasPrefix "SASL_" .Values.kafka.securityProtocol }}true{{ end }}
{{- end }}

{{- define "stream-dedupe.tlsEnabled" -}}
{{- if has .Values.kafka.securityProtocol (list "SSL" "SASL_SSL") }}true{{ end }}
{{- end }}

{{/*
A setting's value as the worker parses it. Helm reads values files into float64, which would
print 1048576 as 1.048576e+06: whole numbers are printed as integers.
*/}}
{{- define "stream-dedupe.settingValue" -}}
{{- if and (kindIs "float64" .) (eq (float64 (int64 .)) .) }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- end }}

{{/* Render-time checks the JSON schema cannot express; each message says how to fix it. */}}
{{- define "stream-dedupe.validate" -}}
{{- if lt (int64 .Values.replicas) 1 }}
{{- fail (printf "replicas must be >= 1 (got %v): set replicas to at most config.input_partitions (%s)" .Values.replicas (include "stream-dedupe.inputPartitions" .)) }}
{{- end }}
{{- if le (float64 .Values.terminationGracePeriodSeconds) (float64 (include "stream-dedupe.shutdownTimeout" .)) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be larger than config.shutdown_timeout (%s s), or Kubernetes kills the worker before it has committed its last batch: raise terminationGracePeriodSeconds" .Values.terminationGracePeriodSeconds (include "stream-dedupe.shutdownTimeout" .)) }}
{{- end }}
{{- $sasl := .Values.kafka.sasl }}
{{- if include "stream-dedupe.saslEnabled" . }}
{{- if not $sasl.existingSecret }}
{{- fail (printf "kafka.securityProtocol %s needs the SASL password: set kafka.sasl.existingSecret to the name of a Secret holding it under key kafka.sasl.passwordKey (%s)" .Values.kafka.securityProtocol $sasl.passwordKey) }}
{{- end }}
{{- if not (or $sasl.username $sasl.usernameSecret.name) }}
{{- fail (printf "kafka.securityProtocol %s needs a SASL user: set kafka.sasl.username or kafka.sasl.usernameSecret.name" .Values.kafka.securityProtocol) }}
{{- end }}
{{- else if or $sasl.existingSecret $sasl.username $sasl.usernameSecret.name }}
{{- fail (printf "kafka.sasl.* is set but kafka.securityProtocol is %s: use SASL_SSL or SASL_PLAINTEXT, or remove the SASL values" .Values.kafka.securityProtocol) }}
{{- end }}
{{- $tls := .Values.kafka.tls }}
{{- if and $tls.existingSecret (not (include "stream-dedupe.tlsEnabled" .)) }}
{{- fail (printf "kafka.tls.existingSecret is set but kafka.securityProtocol is %s: use SSL or SASL_SSL, or remove kafka.tls.existingSecret" .Values.kafka.securityProtocol) }}
{{- end }}
{{- if and $tls.existingSecret (not (or $tls.caKey $tls.certKey)) }}
{{- fail "kafka.tls.existingSecret is set but neither kafka.tls.caKey nor kafka.tls.certKey names a key of it" }}
{{- end }}
{{- if ne (empty $tls.certKey) (empty $tls.keyKey) }}
{{- fail "mutual TLS needs both kafka.tls.certKey and kafka.tls.keyKey (or neither)" }}
{{- end }}
{{- if and $tls.certKey (not $tls.existingSecret) }}
{{- fail "kafka.tls.certKey is set: also set kafka.tls.existingSecret to the Secret that holds the client certificate" }}
{{- end }}
{{- if and .Values.query.enabled (eq (int64 .Values.query.port) (int64 .Values.webPort)) }}
{{- fail (printf "query.port (%v) is webPort: give the query endpoint a port of its own (scraping and querying are exposed apart)" .Values.query.port) }}
{{- end }}
{{- $shards := .Values.config.index_shards }}
{{- if and $shards (gt (int64 $shards) 1) .Values.query.enabled }}
{{- fail (printf "query.enabled is not served with config.index_shards %v yet: disable one of them" $shards) }}
{{- end }}
{{- if and .Values.query.tokenSecret.name (not .Values.query.enabled) }}
{{- fail "query.tokenSecret.name is set but query.enabled is false: set query.enabled=true, or remove the token Secret" }}
{{- end }}
{{- end }}
