package storage

import (
	"os"
	"strconv"
	"strings"
)

// rmemMax is net.core.rmem_max, the cap on SO_RCVBUF (0: unreadable).
func rmemMax() int64 {
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}
