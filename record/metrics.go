package record

// The names of the metrics a proxier exports, declared once: kpsim's
// proxier registers them, a kube-proxy release's are read by them, and
// CheckHistograms compares the first three histograms with the raw
// samples. All but the per-phase one are kube-proxy's own (its
// pkg/proxy/metrics); each carries an ip_family label (IPv4, IPv6) and the
// phase histogram a phase label.
const (
	MetricSyncDuration           = "kubeproxy_sync_proxy_rules_duration_seconds"
	MetricNetworkProgramming     = "kubeproxy_network_programming_duration_seconds"
	MetricSyncPhaseDuration      = "kpsim_sync_phase_duration_seconds"
	MetricPartialSyncDuration    = "kubeproxy_sync_partial_proxy_rules_duration_seconds" // a release's, in nftables mode
	MetricLastSync               = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
	MetricLastQueued             = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"
	MetricEndpointChangesPending = "kubeproxy_sync_proxy_rules_endpoint_changes_pending"
	MetricEndpointChangesTotal   = "kubeproxy_sync_proxy_rules_endpoint_changes_total"
	MetricServiceChangesPending  = "kubeproxy_sync_proxy_rules_service_changes_pending"
	MetricServiceChangesTotal    = "kubeproxy_sync_proxy_rules_service_changes_total"
	MetricRestoreFailures        = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total"
	LabelFamily                  = "ip_family"
	LabelPhase                   = "phase"
)
