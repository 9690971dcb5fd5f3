{{/* Names, labels and the operator's RBAC rules, shared by the templates. */}}

{{- define "tpujob.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: <release>-<chart>, or the release name when it holds the chart's. */}}
{{- define "tpujob.fullname" -}}
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

{{- define "tpujob.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tpujob.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tpujob.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "tpujob.labels" -}}
helm.sh/chart: {{ include "tpujob.chart" . }}
{{ include "tpujob.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "tpujob.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tpujob.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tpujob.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "tpujob.webhookServiceName" -}}
{{- printf "%s-webhook" (include "tpujob.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tpujob.webhookCertificateName" -}}
{{- printf "%s-webhook" (include "tpujob.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Secret holding the webhook's tls.crt and tls.key. */}}
{{- define "tpujob.webhookSecretName" -}}
{{- if .Values.webhook.certManager.enabled }}
{{- printf "%s-webhook-tls" (include "tpujob.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- required "webhook.existingSecret (a Secret with tls.crt and tls.key) is required when webhook.certManager.enabled is false" .Values.webhook.existingSecret }}
{{- end }}
{{- end }}
