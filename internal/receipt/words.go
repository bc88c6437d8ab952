package receipt

import "strings"

// InWords says why an attempt ended early in plain words for people, from
// the failure reason the engine recorded (which stays in the receipt as is).
func InWords(reason string) string {
	r := strings.ToLower(reason)
	switch {
	case reason == "":
		return ""
	case strings.HasPrefix(r, "contract end"):
		return "its contract was ending (the host's end date, or a price increase above the ceiling not accepted)"
	case strings.Contains(r, "paused") || strings.Contains(r, "outbid") || strings.Contains(r, "stopped"):
		return "the host stopped the instance (outbid or preempted)"
	case strings.Contains(r, "vanished"):
		return "the instance disappeared from the marketplace"
	case strings.Contains(r, "ssh lost"):
		return "the connection was lost and the marketplace could not be asked"
	case strings.Contains(r, "image or container error") || strings.Contains(r, "manifest"):
		return "the image could not be pulled or started"
	case strings.Contains(r, "stuck in created"):
		return "the instance never started"
	case strings.Contains(r, "unreachable when the controller resumed"):
		return "the instance could not be reached when vastrun took the run over again"
	case strings.Contains(r, "not running when the controller resumed"):
		return "the instance was gone when vastrun took the run over again"
	case strings.Contains(r, "extra instance"):
		return "an extra instance carrying the run's label (destroyed)"
	case strings.Contains(r, "ready deadline"):
		return "the instance was not ready within the ready deadline"
	}
	return reason
}
