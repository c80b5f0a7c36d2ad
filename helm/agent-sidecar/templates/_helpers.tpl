{{/*
Names and labels, the `helm create` way.
*/}}
{{- define "agent-sidecar.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agent-sidecar.fullname" -}}
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

{{- define "agent-sidecar.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "agent-sidecar.labels" -}}
helm.sh/chart: {{ include "agent-sidecar.chart" . }}
{{ include "agent-sidecar.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "agent-sidecar.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agent-sidecar.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Selector labels of one component: (dict "root" $ "component" "sidecar"). */}}
{{- define "agent-sidecar.componentSelector" -}}
{{ include "agent-sidecar.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The pods that carry the sidecar: the standalone pool, or the application's pods. */}}
{{- define "agent-sidecar.sidecarPodSelector" -}}
{{- if and (eq .Values.mode "sidecar") .Values.application.podSelector }}
{{- toYaml .Values.application.podSelector }}
{{- else }}
{{- include "agent-sidecar.componentSelector" (dict "root" . "component" (ternary "application" "sidecar" (eq .Values.mode "sidecar"))) }}
{{- end }}
{{- end }}

{{- define "agent-sidecar.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "agent-sidecar.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The label that lets a pod call the standalone sidecar when networkPolicy.clients is empty. */}}
{{- define "agent-sidecar.clientLabel" -}}
{{- printf "%s-client" (include "agent-sidecar.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* An image reference: (dict "image" .Values.image "root" $), and "defaultTag" for a tag
other than the chart's appVersion. global.imageRegistry goes in front of a repository whose
first part names no registry host (Docker's rule: a registry has a "." or a ":", or is
localhost). */}}
{{- define "agent-sidecar.image" -}}
{{- $tag := .image.tag | default .defaultTag | default .root.Chart.AppVersion }}
{{- $repository := .image.repository }}
{{- $registry := (.root.Values.global | default dict).imageRegistry | default "" | trimSuffix "/" }}
{{- if $registry }}
{{- $first := regexSplit "/" $repository 2 | first }}
{{- if or (not (contains "/" $repository)) (not (or (contains "." $first) (contains ":" $first) (eq $first "localhost"))) }}
{{- $repository = printf "%s/%s" $registry $repository }}
{{- end }}
{{- end }}
{{- if .image.digest }}
{{- printf "%s@%s" $repository .image.digest }}
{{- else }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}
{{- end }}

{{/* A tool server's resource name: (dict "root" $ "name" "orders"). */}}
{{- define "agent-sidecar.toolServerName" -}}
{{- printf "%s-tool-%s" (include "agent-sidecar.fullname" .root) (lower .name) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agent-sidecar.simulatorName" -}}
{{- printf "%s-llm-simulator" (include "agent-sidecar.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
What the sidecar of this chart's appVersion accepts in its configuration. A setting it
does not read must render no configuration key: an unknown key stops the sidecar (exit 2).
*/}}
{{- define "agent-sidecar.supports" -}}
{{- dict "tls" true "auth" true "unix" true | toJson }}
{{- end }}

{{/* The data directory (SQLite file) and the config file in the sidecar container. */}}
{{- define "agent-sidecar.dataDir" -}}/var/lib/agent-sidecar{{- end }}
{{- define "agent-sidecar.configDir" -}}/etc/agent-sidecar{{- end }}
{{- define "agent-sidecar.configFile" -}}sidecar.yaml{{- end }}
{{- define "agent-sidecar.tlsDir" -}}/etc/agent-sidecar/tls{{- end }}
{{- define "agent-sidecar.authDir" -}}/etc/agent-sidecar/auth{{- end }}

{{/* Whether the sidecar serves TLS: tls.enabled, and the sidecar reads server.tls. */}}
{{- define "agent-sidecar.tlsOn" -}}
{{- $supports := include "agent-sidecar.supports" . | fromJson }}
{{- if and .Values.tls.enabled $supports.tls }}true{{ end }}
{{- end }}

{{/* The port the probes dial: the plaintext health port when the gRPC port serves TLS. */}}
{{- define "agent-sidecar.probePort" -}}
{{- if include "agent-sidecar.tlsOn" . }}{{ .Values.healthPort }}{{ else }}{{ .Values.port }}{{ end }}
{{- end }}

{{/* Whether a principal (an entry of auth.principals) authenticates with a token. */}}
{{- define "agent-sidecar.hasToken" -}}
{{- if or (not (hasKey . "token")) .token }}true{{ end }}
{{- end }}

{{/* The Secret key holding a principal's token. */}}
{{- define "agent-sidecar.tokenKey" -}}
{{- .tokenKey | default .name }}
{{- end }}

{{/* The audit record's volume: the directory of auth.audit.path, unless it is the data
directory (then the record lives on the data volume); empty without a file. */}}
{{- define "agent-sidecar.auditDir" -}}
{{- $path := .Values.auth.audit.path }}
{{- if and $path (ne $path "-") (ne (dir $path) (include "agent-sidecar.dataDir" .)) }}
{{- dir $path }}
{{- end }}
{{- end }}

{{/* The session store: sqlite, postgres or memory. */}}
{{- define "agent-sidecar.store" -}}
{{- $sessions := (.Values.config | default dict).sessions | default dict }}
{{- $sessions.store | default "sqlite" }}
{{- end }}

{{/* config.server.grace_period, defaulted as the sidecar does. */}}
{{- define "agent-sidecar.gracePeriod" -}}
{{- $server := (.Values.config | default dict).server | default dict }}
{{- if hasKey $server "grace_period" }}{{ $server.grace_period }}{{ else }}10{{ end }}
{{- end }}

{{/* The pod's terminationGracePeriodSeconds, above everything that runs in it after deletion. */}}
{{- define "agent-sidecar.terminationGrace" -}}
{{- $grace := include "agent-sidecar.gracePeriod" . | float64 }}
{{- $need := addf .Values.preStopSeconds $grace }}
{{- if eq .Values.mode "sidecar" }}
{{- $need = addf $need .Values.application.drainSeconds }}
{{- end }}
{{- if .Values.terminationGracePeriodSeconds }}
{{- if le (float64 .Values.terminationGracePeriodSeconds) $need }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed preStopSeconds + config.server.grace_period%s (%v), or the drain is cut short" .Values.terminationGracePeriodSeconds (ternary " + application.drainSeconds" "" (eq .Values.mode "sidecar")) $need) }}
{{- end }}
{{- .Values.terminationGracePeriodSeconds }}
{{- else }}
{{- addf $need 5 | ceil | int }}
{{- end }}
{{- end }}

{{/* Refusals: settings that cannot work, caught before anything reaches the cluster. */}}
{{- define "agent-sidecar.validate" -}}
{{- $store := include "agent-sidecar.store" . }}
{{- $config := .Values.config | default dict }}
{{- $model := $config.model | default dict }}
{{- if not (has .Values.mode (list "standalone" "sidecar")) }}
{{- fail (printf "mode must be standalone or sidecar, not %q" .Values.mode) }}
{{- end }}
{{- if eq .Values.mode "standalone" }}
{{- $replicas := ternary .Values.autoscaling.maxReplicas .Values.replicaCount .Values.autoscaling.enabled | int }}
{{- if and (gt $replicas 1) (ne $store "postgres") }}
{{- fail (printf "%d replicas need the shared session store: set config.sessions.store: postgres and postgres.existingSecret (the %s store belongs to one process)" $replicas $store) }}
{{- end }}
{{- end }}
{{- if and (eq $store "postgres") (not .Values.postgres.existingSecret) (not (($config.sessions | default dict).postgres | default dict).dsn) }}
{{- fail "config.sessions.store: postgres needs postgres.existingSecret (a Secret holding the DSN, password included)" }}
{{- end }}
{{- if and (not .Values.modelKey.existingSecret) (not $model.keyless) (not .Values.devSimulator.enabled) }}
{{- fail "set modelKey.existingSecret to the Secret holding the model API key (or config.model.base_url with config.model.keyless=true for an OpenAI-compatible endpoint that takes no key, or devSimulator.enabled=true to try the chart with the LLM simulator)" }}
{{- end }}
{{- if and .Values.devSimulator.enabled $model.base_url }}
{{- fail "devSimulator.enabled points config.model.base_url at the simulator: leave config.model.base_url unset" }}
{{- end }}
{{- if and .Values.a2aHttp.enabled (not $config.a2a) }}
{{- fail "a2aHttp.enabled serves A2A's HTTP bindings of config.a2a: set config.a2a (its skills) too" }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) }}
{{- fail "tls.enabled needs tls.existingSecret (a kubernetes.io/tls Secret)" }}
{{- end }}
{{- $tokens := 0 }}
{{- range $i, $p := .Values.auth.principals }}
{{- if include "agent-sidecar.hasToken" $p }}
{{- $tokens = add1 $tokens }}
{{- if not $.Values.auth.existingSecret }}
{{- fail (printf "auth.principals[%d] (%s) authenticates with a token: set auth.existingSecret to the Secret holding one key per principal, its token (or token: false with a san for a certificate only)" $i $p.name) }}
{{- end }}
{{- if not (regexMatch "^[-._a-zA-Z0-9]+$" (include "agent-sidecar.tokenKey" $p)) }}
{{- fail (printf "auth.principals[%d] (%s): %q is no valid Secret key (letters, digits, '-', '_', '.'): set tokenKey" $i $p.name (include "agent-sidecar.tokenKey" $p)) }}
{{- end }}
{{- else if not $p.san }}
{{- fail (printf "auth.principals[%d] (%s) has token: false and no san: it could never authenticate" $i $p.name) }}
{{- end }}
{{- if and $p.san (not (and $.Values.tls.enabled $.Values.tls.clientAuth)) }}
{{- fail (printf "auth.principals[%d] (%s) is named by a certificate's san: it needs tls.enabled and tls.clientAuth (mutual TLS)" $i $p.name) }}
{{- end }}
{{- end }}
{{- if and .Values.auth.existingSecret (not $tokens) }}
{{- fail "auth.existingSecret holds the principals' tokens, but no entry of auth.principals uses a token" }}
{{- end }}
{{- $audit := .Values.auth.audit.path }}
{{- if and $audit (ne $audit "-") }}
{{- if not (isAbs $audit) }}
{{- fail (printf "auth.audit.path %q: an absolute path (or - for stdout)" $audit) }}
{{- end }}
{{- $auditDir := dir $audit }}
{{- range (list "/" "/tmp" (include "agent-sidecar.configDir" .) (include "agent-sidecar.tlsDir" .) (include "agent-sidecar.authDir" .) .Values.socket.directory) }}
{{- if eq $auditDir . }}
{{- fail (printf "auth.audit.path %q: its directory %s belongs to another volume; use %s/ or a directory of its own such as /var/log/agent-sidecar/" $audit $auditDir (include "agent-sidecar.dataDir" $)) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.tls.enabled (eq (int .Values.healthPort) (int .Values.port)) }}
{{- fail "healthPort must differ from port: with TLS on, the probes' plaintext health port is a port of its own" }}
{{- end }}
{{- /* Each listener of the pod on a port of its own: the second could not bind. */}}
{{- $ports := list (list "port" (int .Values.port)) }}
{{- if .Values.tls.enabled }}{{ $ports = append $ports (list "healthPort" (int .Values.healthPort)) }}{{ end }}
{{- if .Values.mcp.enabled }}{{ $ports = append $ports (list "mcp.port" (int .Values.mcp.port)) }}{{ end }}
{{- if .Values.a2aHttp.enabled }}{{ $ports = append $ports (list "a2aHttp.port" (int .Values.a2aHttp.port)) }}{{ end }}
{{- if .Values.metrics.enabled }}{{ $ports = append $ports (list "metrics.port" (int .Values.metrics.port)) }}{{ end }}
{{- range $i, $a := $ports }}
{{- range $j, $b := $ports }}
{{- if and (lt $i $j) (eq (index $a 1) (index $b 1)) }}
{{- fail (printf "%s and %s are both %d: each listener of the pod needs a port of its own" (index $a 0) (index $b 0) (index $a 1)) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and .Values.socket.enabled (ne .Values.mode "sidecar") }}
{{- fail "socket.enabled shares a Unix socket between containers of one pod: it needs mode: sidecar" }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") .Values.application.enabled (not .Values.application.image.repository) }}
{{- fail "mode: sidecar with application.enabled needs application.image.repository (or application.enabled: false to add the sidecar to your own Deployment)" }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") (not .Values.application.enabled) (not .Values.application.podSelector) }}
{{- fail "mode: sidecar with application.enabled: false needs application.podSelector: the labels of your application's pods, which the tool servers' NetworkPolicy admits" }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") .Values.persistence.enabled }}
{{- fail "persistence is for the standalone sidecar; in sidecar mode each pod keeps its SQLite file in an emptyDir (or use config.sessions.store: postgres)" }}
{{- end }}
{{- $names := list }}
{{- range ($config.tool_servers | default list) }}
{{- $names = append $names .name }}
{{- end }}
{{- range .Values.toolServers }}
{{- if has .name $names }}
{{- fail (printf "tool server name %q is used twice (toolServers and config.tool_servers together)" .name) }}
{{- end }}
{{- $names = append $names .name }}
{{- end }}
{{- end }}

{{/*
The sidecar's configuration file: .Values.config with the keys the chart owns set.
*/}}
{{- define "agent-sidecar.config" -}}
{{- $supports := include "agent-sidecar.supports" . | fromJson }}
{{- $c := deepCopy (.Values.config | default dict) }}
{{- $server := $c.server | default dict }}
{{- $_ := set $server "host" "0.0.0.0" }}
{{- $_ := set $server "port" (int .Values.port) }}
{{- $_ := set $c "server" $server }}
{{- $tlsOn := include "agent-sidecar.tlsOn" . }}
{{- if $tlsOn }}
{{- $tls := dict "cert_file" (printf "%s/tls.crt" (include "agent-sidecar.tlsDir" .)) "key_file" (printf "%s/tls.key" (include "agent-sidecar.tlsDir" .)) }}
{{- if .Values.tls.clientAuth }}
{{- $_ := set $tls "client_ca_file" (printf "%s/ca.crt" (include "agent-sidecar.tlsDir" .)) }}
{{- end }}
{{- $_ := set $server "tls" $tls }}
{{- /* The kubelet's gRPC probes speak no TLS: they get a plaintext port serving health alone. */}}
{{- $_ := set $server "health_port" (int .Values.healthPort) }}
{{- end }}
{{- $principals := list }}
{{- if $supports.auth }}
{{- range .Values.auth.principals }}
{{- $entry := dict "name" .name }}
{{- if include "agent-sidecar.hasToken" . }}
{{- $_ := set $entry "token_file" (printf "%s/%s" (include "agent-sidecar.authDir" $) (include "agent-sidecar.tokenKey" .)) }}
{{- end }}
{{- with .san }}{{ $_ := set $entry "san" . }}{{ end }}
{{- if hasKey . "profiles" }}{{ $_ := set $entry "profiles" .profiles }}{{ end }}
{{- with .quota }}{{ $_ := set $entry "quota" . }}{{ end }}
{{- if .operator }}{{ $_ := set $entry "operator" true }}{{ end }}
{{- with .callback_secret_env }}{{ $_ := set $entry "callback_secret_env" . }}{{ end }}
{{- with .callback_secret_file }}{{ $_ := set $entry "callback_secret_file" . }}{{ end }}
{{- $principals = append $principals $entry }}
{{- end }}
{{- $auth := dict }}
{{- if $principals }}
{{- $_ := set $auth "principals" $principals }}
{{- end }}
{{- with .Values.auth.audit.path }}
{{- $_ := set $auth "audit" (dict "path" .) }}
{{- end }}
{{- if $auth }}
{{- $_ := set $c "auth" $auth }}
{{- end }}
{{- end }}
{{- /* Beyond loopback the sidecar starts only with TLS and principals, or when told it
is insecure; NOTES.txt says which of the two is missing. */}}
{{- if not (and $tlsOn $principals) }}
{{- $_ := set $server "insecure" true }}
{{- end }}
{{- if and .Values.socket.enabled $supports.unix }}
{{- $_ := set $server "unix_socket" (printf "%s/%s" .Values.socket.directory .Values.socket.name) }}
{{- end }}
{{- $model := $c.model | default dict }}
{{- if .Values.devSimulator.enabled }}
{{- $_ := set $model "base_url" (printf "http://%s.%s.svc.%s:%d/openai/v1" (include "agent-sidecar.simulatorName" .) .Release.Namespace .Values.clusterDomain (int .Values.devSimulator.port)) }}
{{- $_ := set $model "keyless" true }}
{{- end }}
{{- if $model }}
{{- $_ := set $c "model" $model }}
{{- end }}
{{- $sessions := $c.sessions | default dict }}
{{- if eq (include "agent-sidecar.store" .) "sqlite" }}
{{- $sqlite := $sessions.sqlite | default dict }}
{{- $_ := set $sqlite "path" (printf "%s/sessions.db" (include "agent-sidecar.dataDir" .)) }}
{{- $_ := set $sessions "sqlite" $sqlite }}
{{- $_ := set $c "sessions" $sessions }}
{{- end }}
{{- /* Standalone: on the pod's interfaces, behind the Service; sidecar mode: for the
application beside it only. */}}
{{- $httpHost := ternary "0.0.0.0" "127.0.0.1" (eq .Values.mode "standalone") }}
{{- if .Values.mcp.enabled }}
{{- $mcp := $c.mcp | default dict }}
{{- $_ := set $mcp "host" $httpHost }}
{{- $_ := set $mcp "port" (int .Values.mcp.port) }}
{{- $_ := set $c "mcp" $mcp }}
{{- end }}
{{- if .Values.a2aHttp.enabled }}
{{- $a2a := $c.a2a | default dict }}
{{- $http := $a2a.http | default dict }}
{{- $_ := set $http "host" $httpHost }}
{{- $_ := set $http "port" (int .Values.a2aHttp.port) }}
{{- $_ := set $a2a "http" $http }}
{{- $_ := set $c "a2a" $a2a }}
{{- end }}
{{- if .Values.metrics.enabled }}
{{- $telemetry := $c.telemetry | default dict }}
{{- $_ := set $telemetry "metrics" (dict "enabled" true "host" "0.0.0.0" "port" (int .Values.metrics.port)) }}
{{- $_ := set $c "telemetry" $telemetry }}
{{- end }}
{{- $servers := list }}
{{- range ($c.tool_servers | default list) }}
{{- $servers = append $servers . }}
{{- end }}
{{- range .Values.toolServers }}
{{- $entry := deepCopy (.config | default dict) }}
{{- $_ := set $entry "name" .name }}
{{- $_ := set $entry "address" (printf "%s.%s.svc.%s:%d" (include "agent-sidecar.toolServerName" (dict "root" $ "name" .name)) $.Release.Namespace $.Values.clusterDomain (int .port)) }}
{{- $servers = append $servers $entry }}
{{- end }}
{{- if $servers }}
{{- $_ := set $c "tool_servers" $servers }}
{{- end }}
{{- toYaml $c }}
{{- end }}

{{/* The address the application dials in sidecar mode. */}}
{{- define "agent-sidecar.localAddress" -}}
{{- $supports := include "agent-sidecar.supports" . | fromJson }}
{{- if and .Values.socket.enabled $supports.unix }}
{{- printf "unix://%s/%s" .Values.socket.directory .Values.socket.name }}
{{- else }}
{{- printf "127.0.0.1:%d" (int .Values.port) }}
{{- end }}
{{- end }}

{{/* The sidecar container (both modes); the caller adds restartPolicy for a native sidecar. */}}
{{- define "agent-sidecar.sidecarContainer" -}}
{{- $config := .Values.config | default dict }}
{{- $model := $config.model | default dict }}
{{- $sessions := $config.sessions | default dict -}}
name: agent-sidecar
image: {{ include "agent-sidecar.image" (dict "image" .Values.image "root" .) | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
command:
  - agent-sidecar
  - serve
  - --config
  - {{ printf "%s/%s" (include "agent-sidecar.configDir" .) (include "agent-sidecar.configFile" .) }}
ports:
  - name: grpc
    containerPort: {{ .Values.port }}
    protocol: TCP
  {{- if include "agent-sidecar.tlsOn" . }}
  - name: health
    containerPort: {{ .Values.healthPort }}
    protocol: TCP
  {{- end }}
  {{- if .Values.mcp.enabled }}
  - name: mcp
    containerPort: {{ .Values.mcp.port }}
    protocol: TCP
  {{- end }}
  {{- if .Values.a2aHttp.enabled }}
  - name: a2a-http
    containerPort: {{ .Values.a2aHttp.port }}
    protocol: TCP
  {{- end }}
  {{- if .Values.metrics.enabled }}
  - name: metrics
    containerPort: {{ .Values.metrics.port }}
    protocol: TCP
  {{- end }}
env:
  - name: PYTHONDONTWRITEBYTECODE
    value: "1"
  - name: AGENT_SIDECAR_LOG_LEVEL
    value: {{ .Values.log.level | quote }}
  - name: AGENT_SIDECAR_LOG_FORMAT
    value: {{ .Values.log.format | quote }}
  {{- if .Values.modelKey.existingSecret }}
  - name: {{ $model.api_key_env | default "GROQ_API_KEY" }}
    valueFrom:
      secretKeyRef:
        name: {{ .Values.modelKey.existingSecret }}
        key: {{ .Values.modelKey.key }}
  {{- else }}
  # No key: an empty variable, so a key in the image's environment is never picked up.
  - name: {{ $model.api_key_env | default "GROQ_API_KEY" }}
    value: ""
  {{- end }}
  {{- if and (eq (include "agent-sidecar.store" .) "postgres") .Values.postgres.existingSecret }}
  - name: {{ ($sessions.postgres | default dict).dsn_env | default "SIDECAR_POSTGRES_DSN" }}
    valueFrom:
      secretKeyRef:
        name: {{ .Values.postgres.existingSecret }}
        key: {{ .Values.postgres.key }}
  {{- end }}
  {{- with .Values.env }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
  {{- with .Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .Values.extraEnvFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
startupProbe:
  grpc:
    port: {{ include "agent-sidecar.probePort" . }}
  {{- toYaml .Values.probes.startup | nindent 2 }}
readinessProbe:
  grpc:
    port: {{ include "agent-sidecar.probePort" . }}
  {{- toYaml .Values.probes.readiness | nindent 2 }}
livenessProbe:
  grpc:
    port: {{ include "agent-sidecar.probePort" . }}
  {{- toYaml .Values.probes.liveness | nindent 2 }}
{{- if and .Values.preStopSeconds (not (and (eq .Values.mode "sidecar") .Values.application.nativeSidecar)) }}
lifecycle:
  preStop:
    exec:
      command: [sleep, {{ .Values.preStopSeconds | quote }}]
{{- end }}
resources:
  {{- toYaml .Values.resources | nindent 2 }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - name: config
    mountPath: {{ include "agent-sidecar.configDir" . }}
    readOnly: true
  - name: data
    mountPath: {{ include "agent-sidecar.dataDir" . }}
  - name: tmp
    mountPath: /tmp
  {{- if .Values.tls.enabled }}
  - name: tls
    mountPath: {{ include "agent-sidecar.tlsDir" . }}
    readOnly: true
  {{- end }}
  {{- if .Values.auth.existingSecret }}
  - name: auth
    mountPath: {{ include "agent-sidecar.authDir" . }}
    readOnly: true
  {{- end }}
  {{- with include "agent-sidecar.auditDir" . }}
  - name: audit
    mountPath: {{ . }}
  {{- end }}
  {{- if .Values.socket.enabled }}
  - name: socket
    mountPath: {{ .Values.socket.directory }}
  {{- end }}
  {{- with .Values.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/* The sidecar's volumes (both modes). */}}
{{- define "agent-sidecar.sidecarVolumes" -}}
- name: config
  configMap:
    name: {{ include "agent-sidecar.fullname" . }}-config
- name: data
  {{- if and .Values.persistence.enabled (eq .Values.mode "standalone") }}
  persistentVolumeClaim:
    claimName: {{ .Values.persistence.existingClaim | default (printf "%s-data" (include "agent-sidecar.fullname" .)) }}
  {{- else }}
  emptyDir: {}
  {{- end }}
- name: tmp
  emptyDir:
    medium: Memory
    sizeLimit: 64Mi
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ .Values.tls.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- if .Values.auth.existingSecret }}
# One key per principal, its token; mounted whole (no subPath), so an update of the
# Secret reaches the files and the sidecar rereads them: tokens rotate without a restart.
- name: auth
  secret:
    secretName: {{ .Values.auth.existingSecret }}
    defaultMode: 0440
{{- end }}
{{- if include "agent-sidecar.auditDir" . }}
- name: audit
  {{- toYaml .Values.auth.audit.volume | nindent 2 }}
{{- end }}
{{- if .Values.socket.enabled }}
- name: socket
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Pod fields every pod of the chart shares: (dict "root" $ "selector" LABELS
"priorityClassName" NAME). LABELS (a YAML string) select the Deployment's own pods: a
topology spread constraint without a labelSelector gets them; without LABELS (the test
pod) no constraint applies. NAME overrides .Values.priorityClassName.
*/}}
{{- define "agent-sidecar.podCommon" -}}
{{- $root := .root }}
{{- $values := $root.Values -}}
serviceAccountName: {{ include "agent-sidecar.serviceAccountName" $root }}
automountServiceAccountToken: {{ $values.serviceAccount.automountToken }}
{{- with $values.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  {{- if kindIs "string" . }}
  - name: {{ . }}
  {{- else }}
  - name: {{ .name }}
  {{- end }}
  {{- end }}
{{- end }}
{{- with (.priorityClassName | default $values.priorityClassName) }}
priorityClassName: {{ . }}
{{- end }}
securityContext:
  {{- toYaml $values.podSecurityContext | nindent 2 }}
{{- with $values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if and .selector $values.topologySpreadConstraints }}
{{- $selector := .selector | fromYaml }}
topologySpreadConstraints:
  {{- range $values.topologySpreadConstraints }}
  {{- $constraint := deepCopy . }}
  {{- if not (hasKey $constraint "labelSelector") }}
  {{- $_ := set $constraint "labelSelector" (dict "matchLabels" $selector) }}
  {{- end }}
  {{- toYaml (list $constraint) | nindent 2 }}
  {{- end }}
{{- end }}
{{- end }}

{{/* The checksum annotation that rolls the pods when the configuration changes. */}}
{{- define "agent-sidecar.configChecksum" -}}
checksum/config: {{ include "agent-sidecar.config" . | sha256sum }}
{{- end }}

{{/* The NetworkPolicy ingress rule of the metrics port. */}}
{{- define "agent-sidecar.metricsIngress" -}}
- ports:
    - port: {{ .Values.metrics.port }}
      protocol: TCP
  {{- with .Values.networkPolicy.metricsScrapers }}
  from:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
