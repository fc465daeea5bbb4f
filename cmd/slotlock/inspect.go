package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/slot"
)

// keyslotCmd prints slot, owning master and lock key of each key. With
// --offline it computes slot and lock key without asking the cluster.
func keyslotCmd(args []string, stdout, stderr io.Writer) int {
	fs, c := newFlags("keyslot", stderr)
	offline := fs.Bool("offline", false, "do not connect: slot and lock key only")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	keys := fs.Args()
	if err := checkKeys(keys); err != nil {
		return fail(stderr, err)
	}
	names, err := slot.NewNamer(c.prefix)
	if err != nil {
		return fail(stderr, usagef("--prefix: %v", err))
	}
	nodes := make([]string, len(keys))
	if !*offline {
		// Inspect reads the slot map and names each key's master.
		infos, code := inspectOnce(c, keys, stderr)
		if infos == nil {
			return code
		}
		for i, k := range infos {
			nodes[i] = k.Node
		}
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tSLOT\tNODE\tLOCK KEY")
	for i, k := range keys {
		node := nodes[i]
		if node == "" {
			node = "-"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", k, slot.KeySlot(k), node, names.LockKey(k))
	}
	_ = w.Flush()
	return exitOK
}

// inspectOnce runs Locker.Inspect on a client of its own; on failure it prints why and returns nil
// and the exit code. Keys whose reads failed are reported, and fail the
// command, after the others are printed (callers print infos first).
func inspectOnce(c *conn, keys []string, stderr io.Writer) ([]slotlock.KeyInfo, int) {
	cl, err := c.client()
	if err != nil {
		return nil, fail(stderr, err)
	}
	defer cl.Close()
	return inspect(c, cl, keys, stderr)
}

// inspect is inspectOnce on a client the caller keeps (release --force
// deletes through the same one).
func inspect(c *conn, cl rueidis.Client, keys []string, stderr io.Writer) ([]slotlock.KeyInfo, int) {
	return inspectBy(c, cl, stderr, func(ctx context.Context, l *slotlock.Locker) ([]slotlock.KeyInfo, error) {
		return l.Inspect(ctx, keys...)
	})
}

// inspectBy runs one inspection (Inspect or InspectPermits) on a Locker
// of cl's, as inspect says.
func inspectBy[T any](c *conn, cl rueidis.Client, stderr io.Writer, f func(context.Context, *slotlock.Locker) ([]T, error)) ([]T, int) {
	l, err := c.lockerOn(cl, slotlock.Options{NoLossTracking: true})
	if err != nil {
		return nil, fail(stderr, err)
	}
	defer l.Close()
	ctx, cancel := c.opContext()
	defer cancel()
	infos, err := f(ctx, l)
	if infos == nil {
		return nil, fail(stderr, err)
	}
	if err != nil {
		fmt.Fprintf(stderr, "slotlock: %v\n", err)
		return infos, exitUnavailable
	}
	return infos, exitOK
}

// jsonKey is one key of inspect --json: durations in milliseconds, times
// in RFC 3339.
type jsonKey struct {
	Key          string       `json:"key"`
	LockKey      string       `json:"lock_key"`
	Slot         uint16       `json:"slot"`
	Node         string       `json:"node"`
	State        string       `json:"state"` // free, held, shared, reserved, error
	Holder       string       `json:"holder,omitempty"`
	Readers      []string     `json:"readers,omitempty"` // a shared key's, latest expiry first
	Holds        int          `json:"holds,omitempty"`
	Reentrant    bool         `json:"reentrant,omitempty"`
	TTLMillis    int64        `json:"ttl_ms"`
	Fence        int64        `json:"fence,omitempty"`
	ReservedFor  string       `json:"reserved_for,omitempty"`
	Marked       bool         `json:"marked,omitempty"`
	Waiters      []jsonWaiter `json:"waiters"`
	WaitersTotal int          `json:"waiters_total"`
	Error        string       `json:"error,omitempty"`
}

type jsonWaiter struct {
	ID       string    `json:"id"`
	Joined   time.Time `json:"joined"`
	Deadline time.Time `json:"deadline"`
}

func state(k slotlock.KeyInfo) string {
	switch {
	case k.Err != nil:
		return "error"
	case k.Held && k.Shared:
		return "shared" // by k.Holds readers
	case k.Held:
		return "held"
	case k.Reserved:
		return "reserved"
	}
	return "free"
}

func ttlMillis(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

// inspectCmd prints the state of each key's lock, as a table or JSON.
func inspectCmd(args []string, stdout, stderr io.Writer) int {
	fs, c := newFlags("inspect", stderr)
	asJSON := fs.Bool("json", false, "print a JSON array, one object per key")
	permits := fs.Bool("permits", false, "the arguments are counted resources (Permit.Resource), not keys")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	keys := fs.Args()
	if err := checkKeys(keys); err != nil {
		return fail(stderr, err)
	}
	if *permits {
		return inspectPermits(c, keys, *asJSON, stdout, stderr)
	}
	infos, code := inspectOnce(c, keys, stderr)
	if infos == nil {
		return code
	}
	if *asJSON {
		out := make([]jsonKey, len(infos))
		for i, k := range infos {
			j := jsonKey{Key: k.Key, LockKey: k.LockKey, Slot: k.Slot, Node: k.Node, State: state(k),
				Holder: k.Holder, Readers: k.Readers, Holds: k.Holds, Reentrant: k.Reentrant, TTLMillis: ttlMillis(k.TTL),
				Fence: k.Fence, ReservedFor: k.ReservedFor, Marked: k.Marked, WaitersTotal: k.WaitersTotal,
				Waiters: []jsonWaiter{}}
			for _, w := range k.Waiters {
				j.Waiters = append(j.Waiters, jsonWaiter(w))
			}
			if k.Err != nil {
				j.Error = k.Err.Error()
			}
			out[i] = j
		}
		return printJSON(out, code, stdout, stderr)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tSTATE\tHOLDER\tHOLDS\tTTL\tFENCE\tWAITERS\tNODE\tSLOT")
	for _, k := range infos {
		holder, ttl, fence := "-", "-", "-"
		switch {
		case k.Held && k.Holder == "" && len(k.Readers) > 0: // several readers
			holder = firstFew(len(k.Readers), ",", func(i int) string { return k.Readers[i] })
		case k.Held:
			holder = k.Holder
		case k.Reserved:
			holder = "for " + k.ReservedFor
		}
		if k.TTL > 0 {
			ttl = k.TTL.Round(time.Millisecond).String()
		} else if k.TTL < 0 {
			ttl = "none"
		}
		if k.Fence > 0 {
			fence = fmt.Sprint(k.Fence)
		}
		waiters := fmt.Sprint(k.WaitersTotal)
		if len(k.Waiters) > 0 {
			waiters += " " + firstFew(len(k.Waiters), " ", func(i int) string { return k.Waiters[i].ID })
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\n", k.Key, state(k), holder, k.Holds, ttl, fence, waiters, k.Node, k.Slot)
	}
	_ = w.Flush()
	return code
}

// jsonPermit is one resource of inspect --permits --json.
type jsonPermit struct {
	Resource string             `json:"resource"`
	Key      string             `json:"key"`
	Slot     uint16             `json:"slot"`
	Node     string             `json:"node"`
	Limit    int64              `json:"limit"`
	Used     int64              `json:"used"`
	Holders  []jsonPermitHolder `json:"holders"`
	Error    string             `json:"error,omitempty"`
}

type jsonPermitHolder struct {
	ID        string `json:"id"`
	Units     int64  `json:"units"`
	TTLMillis int64  `json:"ttl_ms"`
}

// inspectPermits prints who holds units of each resource, as a table or
// JSON (Locker.InspectPermits).
func inspectPermits(c *conn, resources []string, asJSON bool, stdout, stderr io.Writer) int {
	cl, err := c.client()
	if err != nil {
		return fail(stderr, err)
	}
	defer cl.Close()
	infos, code := inspectBy(c, cl, stderr, func(ctx context.Context, l *slotlock.Locker) ([]slotlock.PermitInfo, error) {
		return l.InspectPermits(ctx, resources...)
	})
	if infos == nil {
		return code
	}
	if asJSON {
		out := make([]jsonPermit, len(infos))
		for i, p := range infos {
			j := jsonPermit{Resource: p.Resource, Key: p.Key, Slot: p.Slot, Node: p.Node, Limit: p.Limit, Used: p.Used,
				Holders: []jsonPermitHolder{}}
			for _, h := range p.Holders {
				j.Holders = append(j.Holders, jsonPermitHolder{ID: h.ID, Units: h.Units, TTLMillis: ttlMillis(h.TTL)})
			}
			if p.Err != nil {
				j.Error = p.Err.Error()
			}
			out[i] = j
		}
		return printJSON(out, code, stdout, stderr)
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RESOURCE\tUSED\tLIMIT\tHOLDERS\tNODE\tSLOT")
	for _, p := range infos {
		holders := fmt.Sprint(len(p.Holders))
		if len(p.Holders) > 0 {
			holders += " " + firstFew(len(p.Holders), " ", func(i int) string {
				return fmt.Sprintf("%s:%d", p.Holders[i].ID, p.Holders[i].Units)
			})
		}
		limit := "-"
		if p.Limit > 0 {
			limit = fmt.Sprint(p.Limit)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%d\n", p.Resource, p.Used, limit, holders, p.Node, p.Slot)
	}
	_ = w.Flush()
	return code
}

// printJSON writes v as indented JSON and returns code, or the failure
// to write it.
func printJSON(v any, code int, stdout, stderr io.Writer) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fail(stderr, err)
	}
	return code
}

// firstFew lists the first three of n items (item(i)), joined by sep,
// and "..." after them when there are more: a table cell stays short.
func firstFew(n int, sep string, item func(int) string) string {
	parts := make([]string, 0, 4)
	for i := range min(n, 3) {
		parts = append(parts, item(i))
	}
	if n > 3 {
		parts = append(parts, "...")
	}
	return strings.Join(parts, sep)
}
