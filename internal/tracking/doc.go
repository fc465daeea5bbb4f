// Package tracking tells a Locker at once when a lock key one of its leases
// holds is changed or removed on the server, through RESP3 client tracking.
package tracking
