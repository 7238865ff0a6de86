{{/*
Pod template of the executor pods (spark.kubernetes.executor.podTemplateFile). Spark fills
in image, command, resources and its own volumes; this adds security settings, scheduling,
the Secrets mapped by secretEnv, /tmp, and the state volume when the warehouse is on it.
*/}}
{{- define "ingest.executorPodTemplate" -}}
{{- $e := .Values.spark.executor -}}
apiVersion: v1
kind: Pod
metadata:
  labels:
    {{- include "ingest.labels" . | nindent 4 }}
    app.kubernetes.io/component: executor
    {{- with $e.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $e.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  automountServiceAccountToken: false
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- range . }}
    - name: {{ . }}
    {{- end }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  {{- with $e.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $e.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $e.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: executor
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      {{- include "ingest.env" (dict "ctx" . "driver" false) | nindent 6 }}
      volumeMounts:
        - name: tmp
          mountPath: /tmp
        {{- if include "ingest.executorsMountState" . }}
        - name: state
          mountPath: {{ .Values.persistence.mountPath }}
        {{- end }}
  volumes:
    - name: tmp
      emptyDir:
        sizeLimit: {{ .Values.tmpSizeLimit }}
    {{- if include "ingest.executorsMountState" . }}
    - name: state
      persistentVolumeClaim:
        claimName: {{ include "ingest.claimName" . }}
    {{- end }}
{{- end -}}

{{/* env / envFrom shared by the driver container and the executor pod template;
     called with (dict "ctx" $ "driver" bool). */}}
{{- define "ingest.env" -}}
{{- $driver := .driver -}}
{{- with .ctx -}}
env:
  - name: POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  - name: POD_NAMESPACE
    valueFrom:
      fieldRef:
        fieldPath: metadata.namespace
  - name: POD_IP
    valueFrom:
      fieldRef:
        fieldPath: status.podIP
  {{- if $driver }}
  - name: SPARK_CONF_DIR
    value: {{ include "ingest.sparkConfDir" . }}
  {{- if .Values.ha.enabled }}
  # the host in this replica's lease claim: standbys connect to it on the ha port
  - name: INGEST_ADVERTISE_HOST
    valueFrom:
      fieldRef:
        fieldPath: status.podIP
  {{- end }}
  {{- end }}
  {{- range .Values.secretEnv }}
  - name: {{ .name }}
    valueFrom:
      secretKeyRef:
        name: {{ .secretName }}
        key: {{ .key }}
        {{- if hasKey . "optional" }}
        optional: {{ .optional }}
        {{- end }}
  {{- end }}
  {{- with .Values.env }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .Values.envFromSecrets }}
envFrom:
  {{- range . }}
  - secretRef:
      name: {{ . }}
  {{- end }}
{{- end }}
{{- end -}}
{{- end -}}
