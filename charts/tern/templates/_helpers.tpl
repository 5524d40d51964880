{{- define "tern.name" -}}tern{{- end -}}
{{- define "tern.fullname" -}}
{{- if contains "tern" .Release.Name -}}{{ .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-tern" .Release.Name | trunc 52 | trimSuffix "-" }}{{- end -}}
{{- end -}}
{{- define "tern.labels" -}}
app.kubernetes.io/name: tern
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
{{- define "tern.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
{{- define "tern.serviceAccount" -}}tern-operator{{- end -}}
{{- define "tern.etcdEndpoints" -}}
{{- if .Values.etcd.deploy -}}
https://{{ include "tern.fullname" . }}-etcd.{{ .Release.Namespace }}.svc:2379
{{- else -}}
{{ required "etcd.external.endpoints is required when etcd.deploy is false" .Values.etcd.external.endpoints }}
{{- end -}}
{{- end -}}
