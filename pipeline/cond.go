package pipeline

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/rediserr"
)

// condForm names the conditional delete a server offers. A server that has
// one also has SET key value IFEQ cmp, the conditional write extend uses:
// Redis 8.4 brought DELEX and SET IFEQ together, and Valkey had SET IFEQ
// (8.1) before its conditional deletes. Should a server refuse SET IFEQ
// all the same, extend falls back to transactions (condProbe.refused).
type condForm uint32

const (
	condUnknown condForm = iota // not probed yet
	condNone                    // neither: optimistic transactions only
	condDelex                   // Redis 8.4+: DELEX key IFEQ value
	condDelifeq                 // Valkey: DELIFEQ key value
)

// condProbe finds out once, through COMMAND INFO, whether the server has a
// conditional delete, and remembers when a node refuses one at run time (a
// cluster in the middle of a rolling upgrade, an ACL that denies it): from
// then on that form is not used again.
type condProbe struct {
	mu     sync.Mutex // serialises the probe
	form   atomic.Uint32
	noDel  atomic.Bool
	noSet  atomic.Bool
	forced bool // tests: never use conditional commands
}

// use reports the conditional form op may use, probing the server the
// first time; condNone means optimistic transactions.
func (p *condProbe) use(ctx context.Context, client rueidis.Client, o op) condForm {
	if p.forced || o == opRelease && p.noDel.Load() || o == opExtend && p.noSet.Load() {
		return condNone
	}
	if f := condForm(p.form.Load()); f != condUnknown {
		return f
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if f := condForm(p.form.Load()); f != condUnknown {
		return f
	}
	info, err := client.Do(ctx, client.B().CommandInfo().CommandName("DELEX", "DELIFEQ").Build()).ToArray()
	if err != nil {
		if rediserr.IsErrorReply(err) {
			// COMMAND itself refused (a proxy, an ACL): assume the
			// baseline for good.
			p.form.Store(uint32(condNone))
		}
		return condNone // a lost reply: ask again next time
	}
	f := condNone
	switch {
	case len(info) > 0 && !info[0].IsNil():
		f = condDelex
	case len(info) > 1 && !info[1].IsNil():
		f = condDelifeq
	}
	p.form.Store(uint32(f))
	return f
}

// refused records that a node would not run op's conditional form.
func (p *condProbe) refused(o op) {
	if o == opRelease {
		p.noDel.Store(true)
	} else {
		p.noSet.Store(true)
	}
}
