{{/* Names ------------------------------------------------------------------------------------ */}}

{{- define "gpu-portal.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpu-portal.fullname" -}}
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

{{- define "gpu-portal.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gpu-portal.labels" -}}
helm.sh/chart: {{ include "gpu-portal.chart" . }}
{{ include "gpu-portal.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "gpu-portal.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-portal.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpu-portal.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpu-portal.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gpu-portal.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The chart's own Secret (trial passwords, or values given as plain text). */}}
{{- define "gpu-portal.chartSecretName" -}}
{{- printf "%s-secrets" (include "gpu-portal.fullname" .) }}
{{- end }}

{{- define "gpu-portal.configName" -}}
{{- printf "%s-config" (include "gpu-portal.fullname" .) }}
{{- end }}

{{/* Allowed hosts: the configured ones, else the ingress hosts; one is required. */}}
{{- define "gpu-portal.allowedHosts" -}}
{{- $hosts := .Values.allowedHosts }}
{{- if and (not $hosts) .Values.ingress.enabled }}
{{- range .Values.ingress.hosts }}{{ $hosts = append $hosts .host }}{{ end }}
{{- end }}
{{- if not $hosts }}
{{- fail "allowedHosts: name the host(s) the portal answers to (or enable the ingress with ingress.hosts)" }}
{{- end }}
{{- join "," $hosts }}
{{- end }}

{{/* Where each secret value comes from: "<secret name>/<key>"; fails with what to set. */}}
{{- define "gpu-portal.secretKeyRef.SECRET_KEY" -}}
{{- if .Values.secretKey.existingSecret }}
{{- printf "%s/%s" .Values.secretKey.existingSecret .Values.secretKey.existingSecretKey }}
{{- else if or .Values.secretKey.value .Values.trial.enabled }}
{{- printf "%s/SECRET_KEY" (include "gpu-portal.chartSecretName" .) }}
{{- else }}
{{- fail "secretKey: set secretKey.existingSecret (a Secret with the key secretKey.existingSecretKey holding Django's SECRET_KEY), or secretKey.value, or trial.enabled=true" }}
{{- end }}
{{- end }}

{{- define "gpu-portal.secretKeyRef.DATABASE_URL" -}}
{{- if .Values.trial.enabled }}
{{- printf "%s/DATABASE_URL" (include "gpu-portal.chartSecretName" .) }}
{{- else if .Values.externalDatabase.existingSecret }}
{{- printf "%s/%s" .Values.externalDatabase.existingSecret .Values.externalDatabase.existingSecretKey }}
{{- else if .Values.externalDatabase.url }}
{{- printf "%s/DATABASE_URL" (include "gpu-portal.chartSecretName" .) }}
{{- else }}
{{- fail "externalDatabase: set externalDatabase.existingSecret (a Secret with the key externalDatabase.existingSecretKey holding postgres://user:password@host:5432/db) or externalDatabase.url, or trial.enabled=true" }}
{{- end }}
{{- end }}

{{- define "gpu-portal.redisRequired" -}}
{{- if not (or .Values.trial.enabled .Values.externalRedis.existingSecret .Values.externalRedis.url) }}
{{- fail "externalRedis: set externalRedis.existingSecret (a Secret with the keys externalRedis.brokerUrlKey and externalRedis.cacheUrlKey) or externalRedis.url, or trial.enabled=true" }}
{{- end }}
{{- end }}

{{- define "gpu-portal.secretKeyRef.CELERY_BROKER_URL" -}}
{{- include "gpu-portal.redisRequired" . }}
{{- if or .Values.trial.enabled (not .Values.externalRedis.existingSecret) }}
{{- printf "%s/CELERY_BROKER_URL" (include "gpu-portal.chartSecretName" .) }}
{{- else }}
{{- printf "%s/%s" .Values.externalRedis.existingSecret .Values.externalRedis.brokerUrlKey }}
{{- end }}
{{- end }}

{{- define "gpu-portal.secretKeyRef.CACHE_URL" -}}
{{- include "gpu-portal.redisRequired" . }}
{{- if or .Values.trial.enabled (not .Values.externalRedis.existingSecret) }}
{{- printf "%s/CACHE_URL" (include "gpu-portal.chartSecretName" .) }}
{{- else }}
{{- printf "%s/%s" .Values.externalRedis.existingSecret .Values.externalRedis.cacheUrlKey }}
{{- end }}
{{- end }}

{{- define "gpu-portal.secretKeyRef.OIDC_RP_CLIENT_SECRET" -}}
{{- if not .Values.oidc.clientSecret.existingSecret }}
{{- fail "oidc.clientSecret.existingSecret: single sign-on (oidc.clientId) needs a Secret holding the client secret" }}
{{- end }}
{{- printf "%s/%s" .Values.oidc.clientSecret.existingSecret .Values.oidc.clientSecret.existingSecretKey }}
{{- end }}

{{- define "gpu-portal.secretKeyRef.WORKSPACE_PROXY_TOKEN" -}}
{{- if .Values.workspaces.proxy.token.existingSecret }}
{{- printf "%s/%s" .Values.workspaces.proxy.token.existingSecret .Values.workspaces.proxy.token.existingSecretKey }}
{{- else if .Values.trial.enabled }}
{{- printf "%s/WORKSPACE_PROXY_TOKEN" (include "gpu-portal.chartSecretName" .) }}
{{- else }}
{{- fail "workspaces.proxy.token.existingSecret: the workspace proxy (workspaces.domain) needs a Secret holding the token it shows the portal (key workspaces.proxy.token.existingSecretKey)" }}
{{- end }}
{{- end }}

{{/* What the start-up check of the workspaces' origin reads (portal.E020): the migrations Job
runs it before the ConfigMap exists, so it gets these as plain env entries. */}}
{{- define "gpu-portal.workspaceOriginEnv" -}}
- name: PORTAL_BASE_URL
  value: {{ default (printf "https://%s" (first (splitList "," (include "gpu-portal.allowedHosts" .)))) .Values.baseUrl | quote }}
- name: WORKSPACE_DOMAIN
  value: {{ .Values.workspaces.domain | quote }}
- name: PORTAL_HOST_COOKIES
  value: {{ .Values.workspaces.hostCookies | quote }}
- name: WORKSPACE_ALLOW_SAME_SITE
  value: {{ include "gpu-portal.workspaceAllowSameSite" . | quote }}
- name: SECURE_COOKIES
  value: {{ .Values.https | quote }}
{{- end }}

{{/* A trial without a workspace domain is a developer's install. */}}
{{- define "gpu-portal.workspaceAllowSameSite" -}}
{{- or .Values.workspaces.allowSameSite (and .Values.trial.enabled (not .Values.workspaces.domain)) }}
{{- end }}

{{/* The workspace proxy's name. */}}
{{- define "gpu-portal.workspaceProxyName" -}}
{{- printf "%s-workspace-proxy" (include "gpu-portal.fullname" .) }}
{{- end }}

{{/* One env entry from a "<secret>/<key>" reference. */}}
{{- define "gpu-portal.secretEnv" -}}
{{- $ref := include (printf "gpu-portal.secretKeyRef.%s" .name) .root }}
{{- /* padded: under helm lint, fail only logs and the reference may be empty */ -}}
{{- $parts := concat (regexSplit "/" $ref 2) (list "" "") -}}

- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ index $parts 0 | quote }}
      key: {{ index $parts 1 | quote }}
{{- end }}

{{/* Does the chart need its own Secret? */}}
{{- define "gpu-portal.chartSecretNeeded" -}}
{{- if or .Values.trial.enabled .Values.secretKey.value .Values.externalDatabase.url .Values.externalRedis.url }}true{{ end }}
{{- end }}

{{/* The environment of every portal container (web, workers, beat). */}}
{{- define "gpu-portal.env" -}}
# The kubelet's probes and Prometheus send the pod's IP as Host: the portal answers /healthz,
# /readyz and /metrics whatever the Host (HostFreeProbesMiddleware), so the IP is not added here.
- name: ALLOWED_HOSTS
  value: {{ include "gpu-portal.allowedHosts" . | quote }}
{{- range list "SECRET_KEY" "DATABASE_URL" "CELERY_BROKER_URL" "CACHE_URL" }}
{{ include "gpu-portal.secretEnv" (dict "name" . "root" $) }}
{{- end }}
{{- if .Values.oidc.clientId }}
{{ include "gpu-portal.secretEnv" (dict "name" "OIDC_RP_CLIENT_SECRET" "root" $) }}
{{- end }}
{{- if .Values.workspaces.domain }}
{{ include "gpu-portal.secretEnv" (dict "name" "WORKSPACE_PROXY_TOKEN" "root" $) }}
{{- end }}
{{- with .Values.metrics.token.existingSecret }}
- name: METRICS_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.metrics.token.existingSecretKey }}
{{- end }}
{{- with .Values.metrics.allowedCidrs }}
- name: METRICS_ALLOWED_CIDRS
  value: {{ join "," . | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "gpu-portal.envFrom" -}}
- configMapRef:
    name: {{ include "gpu-portal.configName" . }}
{{- end }}

{{/* A writable /tmp on a read-only root filesystem. */}}
{{- define "gpu-portal.tmpVolume" -}}
- name: tmp
  emptyDir: {}
{{- end }}

{{- define "gpu-portal.tmpMount" -}}
- name: tmp
  mountPath: /tmp
{{- end }}

{{/* Restarts pods when their settings change. */}}
{{- define "gpu-portal.podAnnotations" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Scheduling shared by the portal's pods. */}}
{{- define "gpu-portal.scheduling" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* New pods start once the database schema is current (the migrations Job's work). */}}
{{- define "gpu-portal.waitForMigrations" -}}
- name: wait-for-migrations
  image: {{ include "gpu-portal.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command:
    - sh
    - -c
    - {{ `until python manage.py migrate --check --noinput -v0; do echo "schema not current yet (or a check failed: see above); again in 5 s"; sleep 5; done` | quote }}
  workingDir: /app
  env:
    {{- include "gpu-portal.env" . | nindent 4 }}
  envFrom:
    {{- include "gpu-portal.envFrom" . | nindent 4 }}
  securityContext:
    {{- toYaml .Values.containerSecurityContext | nindent 4 }}
  resources:
    {{- toYaml .Values.migrations.resources | nindent 4 }}
  volumeMounts:
    {{- include "gpu-portal.tmpMount" . | nindent 4 }}
{{- end }}
