{{/* Names, labels and the derived pipeline/Spark configuration. */}}

{{- define "ingest.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ingest.fullname" -}}
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

{{/* The driver's headless Service; also the executor pod name prefix (≤ 47 chars). */}}
{{- define "ingest.driverService" -}}
{{- printf "%s-driver" (include "ingest.fullname" . | trunc 47 | trimSuffix "-") -}}
{{- end -}}

{{- define "ingest.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ingest.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ingest.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ingest.labels" -}}
helm.sh/chart: {{ include "ingest.chart" . }}
{{ include "ingest.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kafka-lakehouse-ingest
{{- end -}}

{{- define "ingest.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ingest.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "ingest.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "ingest.claimName" -}}
{{- default (printf "%s-state" (include "ingest.fullname" .)) .Values.persistence.existingClaim -}}
{{- end -}}

{{/* Paths inside the pod */}}
{{- define "ingest.configDir" -}}/etc/ingest{{- end -}}
{{- define "ingest.sparkConfDir" -}}/etc/ingest{{- end -}}

{{/* "true" when a pipeline path is a local filesystem path (no URI scheme). */}}
{{- define "ingest.isLocalPath" -}}
{{- if or (hasPrefix "file:" .) (not (regexMatch "^[A-Za-z][A-Za-z0-9+.-]*://" .)) -}}true{{- end -}}
{{- end -}}

{{/* A local path with any file: / file:// prefix removed. */}}
{{- define "ingest.localPath" -}}
{{- regexReplaceAll "^file:(//)?" . "" -}}
{{- end -}}

{{/* "true" when the executors need the state volume: Kubernetes executors write data
     files into a warehouse that is a local path on that volume. */}}
{{- define "ingest.executorsMountState" -}}
{{- $sink := .Values.pipeline.sink -}}
{{- $data := ternary ((($sink.hudi | default dict).basePath) | default "") $sink.catalog.warehouse (eq ($sink.format | default "iceberg") "hudi") -}}
{{- if and (eq .Values.spark.mode "kubernetes") .Values.persistence.enabled $data (include "ingest.isLocalPath" $data) -}}true{{- end -}}
{{- end -}}

{{/* The pipeline's exactly-once state paths by value key: checkpoint, warehouse (with its
     SQLite catalog and the journal; not for sink.format hudi) and, for Hudi, the base
     paths (the journal inside). As JSON. */}}
{{- define "ingest.statePaths" -}}
{{- $p := .Values.pipeline -}}
{{- $statePaths := dict "pipeline.checkpointLocation" $p.checkpointLocation -}}
{{- if ne ($p.sink.format | default "iceberg") "hudi" -}}{{/* a Hudi-only pipeline has no catalog */}}
{{- $_ := set $statePaths "pipeline.sink.catalog.warehouse" $p.sink.catalog.warehouse -}}
{{- end -}}
{{- with $p.sink.hudi -}}
{{- $_ := set $statePaths "pipeline.sink.hudi.basePath" .basePath -}}
{{- with .deadLetterBasePath }}{{- $_ := set $statePaths "pipeline.sink.hudi.deadLetterBasePath" . -}}{{- end -}}
{{- end -}}
{{- toJson $statePaths -}}
{{- end -}}

{{/* The value keys of the state paths on the state volume (local paths), comma-separated;
     "" when all state lives in an object store. */}}
{{- define "ingest.localStateKeys" -}}
{{- $keys := list -}}
{{- range $key, $path := include "ingest.statePaths" . | fromJson -}}
{{- if include "ingest.isLocalPath" $path }}{{ $keys = append $keys $key }}{{ end -}}
{{- end -}}
{{- join ", " $keys -}}
{{- end -}}

{{/* "true" when two driver pods (ha.enabled) mount the state volume. */}}
{{- define "ingest.haSharesState" -}}
{{- if and .Values.ha.enabled .Values.persistence.enabled (include "ingest.localStateKeys" .) -}}true{{- end -}}
{{- end -}}

{{/* The PVC's access modes: persistence.accessModes, or chosen from the Spark mode and
     ha.enabled (ReadWriteMany when more than one pod mounts the volume). Once the
     release's claim exists the automatic choice keeps its modes: the API server refuses
     any change to a claim's spec but its size, so an upgrade that flips spark.mode or
     ha.enabled would otherwise fail half-applied (docs/drills/kubernetes/report.md). */}}
{{- define "ingest.accessModes" -}}
{{- $shared := or (include "ingest.executorsMountState" .) (include "ingest.haSharesState" .) -}}
{{- $claim := dict -}}
{{- if and .Values.persistence.enabled (not .Values.persistence.existingClaim) -}}
{{- $claim = lookup "v1" "PersistentVolumeClaim" .Release.Namespace (include "ingest.claimName" .) | default dict -}}
{{- end -}}
{{- if .Values.persistence.accessModes -}}
{{- toYaml .Values.persistence.accessModes -}}
{{- else if $claim -}}
{{- if and $shared (not (has "ReadWriteMany" $claim.spec.accessModes)) -}}
{{- fail (printf "persistence: the claim %s exists with access modes %s, which Kubernetes cannot change, but %s now need ReadWriteMany (more than one pod mounts the volume). Move the state to a ReadWriteMany claim and set persistence.existingClaim to it, or keep spark.mode and ha.enabled as they were." $claim.metadata.name (join ", " $claim.spec.accessModes) (include "ingest.localStateKeys" .)) -}}
{{- end -}}
{{- toYaml $claim.spec.accessModes -}}
{{- else if $shared -}}
{{- toYaml (list "ReadWriteMany") -}}
{{- else -}}
{{- toYaml (list "ReadWriteOnce") -}}
{{- end -}}
{{- end -}}

{{/*
Cross-field checks that a JSON schema cannot word clearly. Each fails the install with
one line naming the values to change.
*/}}
{{- define "ingest.validate" -}}
{{- $v := .Values -}}
{{- $p := $v.pipeline -}}
{{- $mount := trimSuffix "/" $v.persistence.mountPath -}}
{{- range $key, $path := include "ingest.statePaths" . | fromJson -}}
{{- if include "ingest.isLocalPath" $path -}}
{{- if not $v.persistence.enabled -}}
{{- fail (printf "%s is the local path %q but persistence.enabled is false: exactly-once state would be lost with the pod. Enable persistence (a PVC) or use an object store URI (s3a://…, gs://…)." $key $path) -}}
{{- end -}}
{{- $local := include "ingest.localPath" $path -}}
{{- if not (hasPrefix (printf "%s/" $mount) $local) -}}
{{- fail (printf "%s (%s) must be under persistence.mountPath (%s), the only durable directory in the pod." $key $path $mount) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $v.ha.enabled (include "ingest.haSharesState" .) (not $v.persistence.existingClaim) (not (has "ReadWriteMany" (include "ingest.accessModes" . | fromYamlArray))) -}}
{{- fail (printf "ha.enabled: both driver pods need the checkpoint and the table, but %s are on a volume whose persistence.accessModes (%s) lack ReadWriteMany. Use persistence.accessModes: [ReadWriteMany] (or [] to choose it), or put them on an object store (s3a://…)." (include "ingest.localStateKeys" .) (include "ingest.accessModes" . | fromYamlArray | join ", ")) -}}
{{- end -}}
{{- if and (include "ingest.executorsMountState" .) (not $v.persistence.existingClaim) (not (has "ReadWriteMany" (include "ingest.accessModes" . | fromYamlArray))) -}}
{{- fail "persistence.accessModes must include ReadWriteMany: with spark.mode=kubernetes the executor pods write data files into the warehouse (or Hudi base path) on that volume. Alternatively put pipeline.sink.catalog.warehouse on an object store, or use spark.mode=local." -}}
{{- end -}}
{{- if $v.ha.enabled -}}
{{- with $p.ha -}}
{{- if and (hasKey . "mode") (ne (toString .mode) "auto") -}}
{{- fail (printf "pipeline.ha.mode is %v but ha.enabled runs two identical driver pods with pipeline.ha.mode auto (the chart sets it): remove pipeline.ha.mode." .mode) -}}
{{- end -}}
{{- if and (hasKey . "port") (ne (int .port) (int $v.ha.port)) -}}
{{- fail (printf "pipeline.ha.port (%v) differs from ha.port (%v): with ha.enabled the chart sets pipeline.ha.port from ha.port (the containerPort named ha); set ha.port only." .port $v.ha.port) -}}
{{- end -}}
{{- end -}}
{{- if ne ((($p.commit | default dict).mode) | default "exactly-once") "exactly-once" -}}
{{- fail "ha.enabled needs pipeline.commit.mode exactly-once: the lease lives in its journal, and only its writer epoch fences the replica taken over." -}}
{{- end -}}
{{- $used := list (int $v.metrics.port) -}}
{{- if eq $v.spark.mode "kubernetes" }}{{ $used = concat $used (list (int $v.spark.driver.port) (int $v.spark.driver.blockManagerPort)) }}{{ end -}}
{{- if has (int $v.ha.port) $used -}}
{{- fail (printf "ha.port (%v) is already used by the driver pod (metrics.port, spark.driver.port or spark.driver.blockManagerPort): choose another port." $v.ha.port) -}}
{{- end -}}
{{- end -}}
{{- $stopTimeout := 25.0 -}}
{{- with $p.run -}}{{- if hasKey . "stopTimeoutSeconds" -}}{{- $stopTimeout = float64 .stopTimeoutSeconds -}}{{- end -}}{{- end -}}
{{- if le (float64 $v.terminationGracePeriodSeconds) $stopTimeout -}}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed pipeline.run.stopTimeoutSeconds (%v): on SIGTERM the driver lets the running batch commit for up to stopTimeoutSeconds, then stops; Kubernetes kills the pod after the grace period." $v.terminationGracePeriodSeconds $stopTimeout) -}}
{{- end -}}
{{- if and (eq $v.spark.mode "kubernetes") (not $v.rbac.create) (not $v.serviceAccount.name) -}}
{{- fail "spark.mode=kubernetes with rbac.create=false needs serviceAccount.name: a ServiceAccount allowed to create, watch and delete pods, services, configmaps and persistentvolumeclaims in the release namespace." -}}
{{- end -}}
{{- $subs := list -}}
{{- range $k := list "topics" "assign" "topicPattern" -}}
{{- if get $p.source $k -}}{{- $subs = append $subs (printf "pipeline.source.%s" $k) -}}{{- end -}}
{{- end -}}
{{- if ne (len $subs) 1 -}}
{{- fail (printf "set exactly one of pipeline.source.topics, pipeline.source.assign, pipeline.source.topicPattern (got: %s). Values files merge with the chart's defaults: to use assign or topicPattern, also set pipeline.source.topics: null." (join ", " $subs | default "none")) -}}
{{- end -}}
{{- range $k, $val := ($p.source.kafka | default dict) -}}
{{- if and (regexMatch "(?i)(password|secret|token|key)$" $k) (not (regexMatch "^\\$\\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\\}$" (toString $val))) -}}
{{- fail (printf "pipeline.source.kafka.%s holds a literal value: reference a Secret instead (secretEnv: [{name: VAR, secretName: …, key: …}] and %s: ${VAR})." $k $k) -}}
{{- end -}}
{{- end -}}
{{- range $k, $val := ($p.sink.catalog.properties | default dict) -}}
{{- if and (regexMatch "(?i)(password|secret|token|credential)" $k) (not (regexMatch "^\\$\\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\\}$" (toString $val))) -}}
{{- fail (printf "pipeline.sink.catalog.properties.%s holds a literal value: reference a Secret instead (secretEnv and ${VAR})." $k) -}}
{{- end -}}
{{- end -}}
{{- with $p.sink.catalog.uri -}}
{{- if regexMatch "://[^/@:]+:[^@$][^@]*@" . -}}
{{- fail "pipeline.sink.catalog.uri contains a literal password: write it as ${VAR} (user:${PGPASSWORD}@host) and map VAR from a Secret with secretEnv." -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The pipeline config written to the ConfigMap: the user's pipeline values plus what
     the chart owns (metrics endpoint, Spark master, driver pod name). */}}
{{- define "ingest.pipelineConfig" -}}
{{- $cfg := deepCopy .Values.pipeline -}}
{{- $spark := deepCopy (default dict $cfg.spark) -}}
{{- $sparkConf := deepCopy (default dict $spark.conf) -}}
{{- if eq .Values.spark.mode "kubernetes" -}}
{{- $_ := set $spark "master" .Values.spark.kubernetesMaster -}}
{{- /* executors get an owner reference to the driver pod: deleted with it */ -}}
{{- $_ := set $sparkConf "spark.kubernetes.driver.pod.name" "${POD_NAME}" -}}
{{- else -}}
{{- $_ := set $spark "master" .Values.spark.local.master -}}
{{- end -}}
{{- if and .Values.ha.enabled (eq .Values.spark.mode "kubernetes") -}}
{{- /* per pod, not the headless Service (it resolves to both driver pods): executors
       connect to their own driver */ -}}
{{- $_ := set $sparkConf "spark.driver.host" "${POD_IP}" -}}
{{- end -}}
{{- $_ := set $spark "conf" $sparkConf -}}
{{- $_ := set $cfg "spark" $spark -}}
{{- if .Values.ha.enabled -}}
{{- $ha := deepCopy (default dict $cfg.ha) -}}
{{- $_ := set $ha "mode" "auto" -}}
{{- $_ := set $ha "port" .Values.ha.port -}}
{{- $_ := set $cfg "ha" $ha -}}
{{- end -}}
{{- $_ := set $cfg "metrics" (dict "enabled" true "host" "0.0.0.0" "port" .Values.metrics.port "lagRefreshSeconds" .Values.metrics.lagRefreshSeconds) -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* spark-defaults.conf: read by spark-submit when pyspark starts the driver JVM. */}}
{{- define "ingest.sparkDefaults" -}}
{{- $s := .Values.spark -}}
{{- $conf := dict
  "spark.sql.session.timeZone" "UTC"
  "spark.sql.execution.arrow.pyspark.enabled" "true"
  "spark.python.worker.reuse" "true"
  "spark.ui.showConsoleProgress" "false"
  "spark.driver.memory" $s.driver.memory
-}}
{{- if eq $s.mode "kubernetes" -}}
{{- $svc := include "ingest.driverService" . -}}
{{- $_ := merge $conf (dict
  "spark.submit.deployMode" "client"
  "spark.kubernetes.namespace" .Release.Namespace
  "spark.kubernetes.container.image" (include "ingest.image" .)
  "spark.kubernetes.container.image.pullPolicy" .Values.image.pullPolicy
  "spark.kubernetes.executor.podTemplateFile" (printf "%s/executor-pod-template.yaml" (include "ingest.sparkConfDir" .))
  "spark.kubernetes.executor.podTemplateContainerName" "executor"
  "spark.kubernetes.executor.deleteOnTermination" "true"
  "spark.driver.bindAddress" "0.0.0.0"
  "spark.driver.port" (toString $s.driver.port)
  "spark.driver.blockManager.port" (toString $s.driver.blockManagerPort)
  "spark.executor.cores" (toString $s.executor.cores)
  "spark.executor.memory" $s.executor.memory
  "spark.executor.memoryOverhead" $s.executor.memoryOverhead
  "spark.kubernetes.executor.request.cores" (toString (default $s.executor.cores $s.executor.requestCores))
) -}}
{{- /* Executors reach the driver at spark.driver.host. Spark >= 4.1 would otherwise give
       them spark.driver.bindAddress (useDriverPodIP, default true), which is 0.0.0.0 for a
       driver in client mode. spark.kubernetes.executor.podNamePrefix stays Spark's
       (app name + a unique id per start): a driver container restarted inside the same
       pod must not collide with its previous start's executor pods (HTTP 409). */ -}}
{{- $_ := set $conf "spark.kubernetes.executor.useDriverPodIP" "false" -}}
{{- if not .Values.ha.enabled -}}
{{- /* with ha.enabled it is per pod: in pipeline.yaml (ingest.pipelineConfig) */ -}}
{{- $_ := set $conf "spark.driver.host" (printf "%s.%s.svc" $svc .Release.Namespace) -}}
{{- end -}}
{{- with .Values.imagePullSecrets -}}
{{- $_ := set $conf "spark.kubernetes.container.image.pullSecrets" (join "," .) -}}
{{- end -}}
{{- with $s.executor.limitCores -}}
{{- $_ := set $conf "spark.kubernetes.executor.limit.cores" (toString .) -}}
{{- end -}}
{{- if $s.dynamicAllocation.enabled -}}
{{- $_ := merge $conf (dict
  "spark.dynamicAllocation.enabled" "true"
  "spark.dynamicAllocation.shuffleTracking.enabled" "true"
  "spark.dynamicAllocation.minExecutors" (toString $s.dynamicAllocation.minExecutors)
  "spark.dynamicAllocation.maxExecutors" (toString $s.dynamicAllocation.maxExecutors)
) -}}
{{- else -}}
{{- $_ := set $conf "spark.executor.instances" (toString $s.executor.instances) -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := $s.conf -}}
{{- $_ := set $conf $k (toString $v) -}}
{{- end -}}
# spark-defaults.conf rendered by the ingest chart (spark.mode={{ $s.mode }})
{{- if and .Values.ha.enabled (eq $s.mode "kubernetes") }}
# ha.enabled: spark.driver.host is per driver pod, set in pipeline.yaml (spark.conf) from POD_IP
{{- end }}
{{- range $k := keys $conf | sortAlpha }}
{{ printf "%-50s %s" $k (get $conf $k) }}
{{- end }}
{{- end -}}

{{/* The driver pod's affinity: .Values.affinity plus, with ha.enabled, anti-affinity
     between the driver pods (unless .Values.affinity has its own podAntiAffinity). */}}
{{- define "ingest.affinity" -}}
{{- $aff := deepCopy (default dict .Values.affinity) -}}
{{- if and .Values.ha.enabled (not (hasKey $aff "podAntiAffinity")) -}}
{{- $match := merge (include "ingest.selectorLabels" . | fromYaml) (dict "app.kubernetes.io/component" "driver") -}}
{{- $term := dict "labelSelector" (dict "matchLabels" $match) "topologyKey" .Values.ha.antiAffinityTopologyKey -}}
{{- if eq .Values.ha.antiAffinity "required" -}}
{{- $_ := set $aff "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) -}}
{{- else -}}
{{- $_ := set $aff "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) -}}
{{- end -}}
{{- end -}}
{{- if $aff }}{{ toYaml $aff }}{{ end -}}
{{- end -}}
