package batch

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/rediserr"
	"github.com/slotlock/slotlock/slot"
)

// lostPrefix starts the error reply of a guard whose lock keys are gone.
const lostPrefix = "SLOTLOCK_LOST"

// Guard runs one command on userKeys (all in one slot) only while who still
// holds the lock keys idx of set (all in that same slot): the check and the
// command run in one script. It returns the command's reply, or the set
// indexes of the lock keys no longer held (and then the command did not
// run).
func (e *Engine) Guard(ctx context.Context, set *protocol.Set, idx []int, who protocol.Who, userKeys []string, cmd []string) (rueidis.RedisMessage, []int, error) {
	keys := make([]string, 0, len(idx)+len(userKeys))
	for _, i := range idx {
		keys = append(keys, set.Lock[i])
	}
	keys = append(keys, userKeys...)
	if who.Lease != "" {
		// Declared for Redis's migration rules: the script reads them.
		for _, i := range idx {
			keys = append(keys, set.HoldKey(i))
		}
	}
	args := make([]string, 0, 3+len(cmd))
	args = append(args, who.Holder, who.Lease, strconv.Itoa(len(idx)))
	args = append(args, cmd...)
	s := guardScript
	b := e.client.B()
	res := e.client.Do(ctx, b.Evalsha().Sha1(s.slotSHA).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	if rediserr.IsNoScript(res.Error()) {
		res = e.client.Do(ctx, b.Eval().Script(s.slotText).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	msg, err := res.ToMessage()
	if err == nil || rediserr.IsNil(err) {
		// A nil reply is the command's answer (GET of a missing key, SET
		// NX of one that exists): it ran. rueidis reports it as an error
		// that is not a Redis error.
		return msg, nil, nil
	}
	if rediserr.IsErrorReply(err) {
		if rest, found := strings.CutPrefix(err.Error(), lostPrefix); found {
			var lost []int
			for _, f := range strings.Fields(rest) {
				if p, perr := strconv.Atoi(f); perr == nil && p >= 1 && p <= len(idx) {
					lost = append(lost, idx[p-1])
				}
			}
			return rueidis.RedisMessage{}, lost, nil
		}
	}
	node := "slot " + strconv.Itoa(int(slot.KeySlot(userKeys[0])))
	return rueidis.RedisMessage{}, nil, protocol.NewNodeError(node, s.name, len(keys), s.explainDenial(err))
}
