package main

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/rediserr"
	"github.com/slotlock/slotlock/slot"
)

// releaseCmd deletes the locks of keys whoever holds them: the operator's
// override for a holder that is stuck and will not let go. It shows what
// it is about to delete (an inspection), asks unless --yes, and says what
// each deletion removed: GETDEL returns the very value it deleted, which
// may differ from the inspection if the lock changed hands in between.
// The holder's lease, if its process lives, finds the loss (its watchdog or
// loss tracker) and ends.
func releaseCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs, c := newFlags("release", stderr)
	force := fs.Bool("force", false, "required: delete locks held by others")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	keys := fs.Args()
	if !*force {
		return fail(stderr, usagef("release deletes locks held by others: say --force"))
	}
	if err := checkKeys(keys); err != nil {
		return fail(stderr, err)
	}
	cl, err := c.client()
	if err != nil {
		return fail(stderr, err)
	}
	defer cl.Close()
	infos, code := inspect(c, cl, keys, stderr)
	if infos == nil || code != exitOK {
		return code
	}
	held := 0
	for _, k := range infos {
		if k.Held || k.Reserved {
			held++
		}
	}
	if !*yes {
		fmt.Fprintf(stderr, "about to delete the locks of %d key(s), %d of them held or reserved:\n", len(keys), held)
		for _, k := range infos {
			fmt.Fprintf(stderr, "  %s: %s%s\n", k.Key, state(k), holderText(k, k.ReservedFor))
		}
		fmt.Fprint(stderr, "delete? [y/N] ")
		answer, _ := bufio.NewReader(stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			fmt.Fprintln(stderr, "slotlock: not confirmed; nothing deleted")
			return exitAborted
		}
	}

	names, err := slot.NewNamer(c.prefix)
	if err != nil {
		return fail(stderr, usagef("--prefix: %v", err))
	}
	ctx, cancel := c.opContext()
	defer cancel()
	// Per key: the lock, an owner's hold set, and a shared key's holders
	// set. The holders set must go with the lock: left behind, its live
	// members would count as readers again once the key is shared in its
	// set form, and their renewals would succeed.
	const per = 3
	cmds := make(rueidis.Commands, 0, per*len(keys))
	for _, k := range keys {
		s := slot.KeySlot(k)
		cmds = append(cmds,
			cl.B().Getdel().Key(names.LockKeyInSlot(k, s)).Build(),
			cl.B().Del().Key(names.HoldCountKeyInSlot(k, s)).Build(),
			cl.B().Del().Key(names.SharedKeyInSlot(k, s)).Build())
	}
	res := cl.DoMulti(ctx, cmds...)
	code = exitOK
	for i, k := range keys {
		v, err := res[per*i].ToString()
		holds, herr := res[per*i+1].AsInt64()
		readers, rerr := res[per*i+2].AsInt64()
		switch {
		case rediserr.IsNil(err):
			fmt.Fprintf(stdout, "%s: not locked, nothing deleted\n", k)
		case err != nil:
			fmt.Fprintf(stderr, "slotlock: %s: %v\n", k, err)
			code = exitUnavailable
		default:
			p := lockval.Parse(v)
			fmt.Fprintf(stdout, "%s: deleted %s%s\n", k, names.LockKey(k), holderText(slotlock.KeyInfo{Holder: short(p.Holder), Shared: p.Shared}, short(p.Waiter)))
		}
		if herr != nil {
			fmt.Fprintf(stderr, "slotlock: %s: hold set: %v\n", k, herr)
			code = exitUnavailable
		} else if holds > 0 {
			fmt.Fprintf(stdout, "%s: deleted its hold set %s\n", k, names.HoldCountKey(k))
		}
		if rerr != nil {
			fmt.Fprintf(stderr, "slotlock: %s: holders set: %v\n", k, rerr)
			code = exitUnavailable
		} else if readers > 0 {
			fmt.Fprintf(stdout, "%s: deleted its holders set %s\n", k, names.SharedKeyInSlot(k, slot.KeySlot(k)))
		}
	}
	return code
}

func short(token string) string {
	if token == "" {
		return ""
	}
	return lockval.Short(token)
}

// holderText describes a lock's holder for the operator: k's Holder,
// Holds and readers, or whom the lock is reserved for.
func holderText(k slotlock.KeyInfo, reservedFor string) string {
	holder, holds := k.Holder, k.Holds
	switch {
	case k.Shared && holder == "" && holds > 0:
		return fmt.Sprintf(" (%d readers: %s)", holds, strings.Join(k.Readers, ", "))
	case k.Shared && holder == "":
		return " (readers)"
	case k.Shared:
		return " (read by " + holder + ")"
	case holder != "" && holds > 1:
		return fmt.Sprintf(" (held by %s, %d holds)", holder, holds)
	case holder != "":
		return " (held by " + holder + ")"
	case reservedFor != "":
		return " (reserved for " + reservedFor + ")"
	}
	return ""
}
