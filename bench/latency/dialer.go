package latency

import (
	"context"
	"net"
	"time"
)

// Dialer dials TCP connections behind an emulated round trip. The zero RTT
// dials plain connections, with nothing in between.
type Dialer struct {
	RTT time.Duration
	// Stats, if set, counts the chunks of every connection dialled.
	Stats *Stats
}

// DialContext dials addr with a default net.Dialer; it has go-redis's
// Dialer signature.
func (d Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	return d.DialWith(ctx, &nd, network, addr)
}

// DialWith dials addr with nd (a client's own dialer, with its timeouts
// and keep-alive) and wraps the connection.
func (d Dialer) DialWith(ctx context.Context, nd *net.Dialer, network, addr string) (net.Conn, error) {
	conn, err := nd.DialContext(ctx, network, addr)
	if err != nil || d.RTT <= 0 {
		return conn, err
	}
	c, err := Wrap(conn, d.RTT, d.Stats)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}
