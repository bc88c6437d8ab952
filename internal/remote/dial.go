package remote

import (
	"context"
	"fmt"
	"net"
)

// Dial opens a TCP connection to addr as the instance sees it (e.g.
// 127.0.0.1:8000), through this SSH connection. A port nothing listens on
// is an error here, unlike through [Client.Forward], so readiness checks
// can tell "not yet listening" from "listening".
func (c *Client) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	cn, err := c.conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial %s on the instance: %w", addr, err)
	}
	conn, err := cn.c.Dial(network, addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s on the instance: %w", addr, err)
	}
	return conn, nil
}
