package run

// HealthCheck is what the canary's health_url answered on the instance,
// during the server smoke contract (see canary.RunServer): the URL names
// a host:port as the instance sees it, usually its own loopback.
type HealthCheck struct {
	URL      string `json:"url"`
	Status   int    `json:"status,omitempty"`
	Attempts int    `json:"attempts"`
	Passed   bool   `json:"passed"`
	Error    string `json:"error,omitempty"`
}
