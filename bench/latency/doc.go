// Package latency puts an emulated network between a client and its
// servers: every connection it wraps holds each chunk of bytes for half a
// round-trip time in each direction, counted from the moment the chunk was
// written (by the client, or by the server as seen when it reached the
// socket).
//
// Benchmarks on loopback hide what round trips cost: a loopback round trip
// is a few microseconds, a zone's 0.1 to 0.5 ms, and across zones 1 to 2
// ms. This machine has no netem (`tc qdisc ... netem`: "Specified qdisc
// kind is unknown"), so the delay is added in the client, in user space.
//
// Two properties make it a network and not a slow pipe:
//
//   - Order is kept: chunks leave in the order they were written.
//   - Chunks are not serialised: each chunk's release time is fixed when it
//     is written, and a chunk waits only for its own time, never for the
//     one before it to be delayed too. A pipelined burst of 1,000 commands
//     written as several chunks arrives RTT/2 later, in one go, as it
//     would over a wire (bandwidth is not modelled).
//
// Timer granularity is the hard part. On an idle Go runtime
// time.Sleep(100µs) takes about 1.1 ms: the scheduler parks in epoll_wait
// with a timeout of whole milliseconds. On Linux each direction of a
// connection therefore waits on a timerfd of its own, registered with the
// runtime's netpoller, which wakes in tens of microseconds; the constant
// part of that overshoot is measured once per process and subtracted (see
// Lead). What a delay really comes to is measured, not assumed: the
// benchmark report prints the round trip of a PING and of a 1,000-command
// pipeline through this layer next to the asked-for RTT.
package latency
